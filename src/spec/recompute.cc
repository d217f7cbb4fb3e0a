#include "hydraulis/spec/recompute.h"

#include "hydraulis/base/error.h"

namespace hydraulis {

std::string ToString(Recompute mode) {
  switch (mode) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "none";
}

Recompute ParseRecompute(const std::string& text, const std::string& what) {
  for (const Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    if (text == ToString(mode)) return mode;
  }
  throw InvalidInput(what + ": expected none, selective or full, got '" + text + "'");
}

}  // namespace hydraulis
