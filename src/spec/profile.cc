#include "hydraulis/spec/profile.h"

namespace hydraulis {

const SchemeProfile* Profile::Find(const Scheme& scheme) const {
  for (const auto& s : schemes) {
    if (s.scheme == scheme) return &s;
  }
  return nullptr;
}

}  // namespace hydraulis
