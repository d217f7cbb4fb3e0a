#include <algorithm>
#include <map>

#include "hydraulis/spec/scheme.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

std::string SchemeName(const Scheme& scheme) {
  std::vector<std::string> parts;
  if (scheme.cp > 1) parts.push_back("CP" + std::to_string(scheme.cp));
  parts.push_back("TP" + std::to_string(scheme.tp));
  if (scheme.pp > 1) parts.push_back("PP" + std::to_string(scheme.pp));
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
  return out + ")";
}

int Strategy::Gpus() const {
  int total = 0;
  for (const auto& p : pipelines) total += p.Gpus();
  return total;
}

std::string StrategyDescription(const Strategy& strategy) {
  std::string out;
  std::size_t i = 0;
  while (i < strategy.pipelines.size()) {
    std::size_t j = i;
    while (j < strategy.pipelines.size() && strategy.pipelines[j] == strategy.pipelines[i]) ++j;
    if (!out.empty()) out += " + ";
    if (j - i > 1) out += std::to_string(j - i) + " x ";
    out += SchemeName(strategy.pipelines[i]);
    i = j;
  }
  return out.empty() ? "(empty)" : out;
}

}  // namespace hydraulis
