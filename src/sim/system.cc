#include "hydraulis/sim/system.h"

#include "hydraulis/base/error.h"

namespace hydraulis {

std::string SystemName(System system) {
  switch (system) {
    case System::kPadding:
      return "padding";
    case System::kStaticFixed:
      return "static-fixed";
    case System::kStaticBalanced:
      return "static-balanced";
    case System::kPublished:
      return "published";
    case System::kOurs:
      return "ours";
  }
  return "?";
}

System ParseSystem(const std::string& name) {
  for (System s : {System::kPadding, System::kStaticFixed, System::kStaticBalanced,
                   System::kPublished, System::kOurs}) {
    if (SystemName(s) == name) return s;
  }
  throw InvalidInput("--system: unknown system '" + name +
                     "' (expected padding, static-fixed, static-balanced, published or ours)");
}

}  // namespace hydraulis
