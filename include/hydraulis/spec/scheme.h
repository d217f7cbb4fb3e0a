// One pipeline's parallel configuration <cp, tp, pp>.
#pragma once

#include <compare>
#include <string>

namespace hydraulis {

// Context, tensor and pipeline parallel degrees of one pipeline (data-parallel replica).
// A scheme uses cp * tp * pp GPUs; layers are split evenly over pp stages.
struct Scheme {
  int cp = 1;
  int tp = 1;
  int pp = 1;

  int Gpus() const { return cp * tp * pp; }
  auto operator<=>(const Scheme&) const = default;
};

// "TP4", "(TP8,PP3)", "(CP2,TP8)": the notation of method.md.
std::string SchemeName(const Scheme& scheme);

}  // namespace hydraulis
