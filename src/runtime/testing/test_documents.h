// Random token documents shared by the runtime test binaries (header-only).
#pragma once

#include <cstdint>
#include <vector>

#include "hydraulis/base/rng.h"

namespace hydraulis::test_support {

using Documents = std::vector<std::vector<std::int64_t>>;

// Documents of the given lengths with token ids in [0, vocab) drawn from `seed`; the
// project's Rng keeps them identical on every platform and process.
inline Documents RandomDocuments(const std::vector<int>& lengths, std::uint64_t seed, int vocab) {
  Rng rng(seed);
  Documents docs;
  for (int len : lengths) {
    std::vector<std::int64_t> d;
    for (int i = 0; i < len; ++i) {
      d.push_back(static_cast<std::int64_t>(rng.Below(static_cast<std::uint64_t>(vocab))));
    }
    docs.push_back(d);
  }
  return docs;
}

}  // namespace hydraulis::test_support
