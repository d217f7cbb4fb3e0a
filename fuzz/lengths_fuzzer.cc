// Document lengths as text (one per line) or a JSON array: ParseLengths.
#include "fuzz_input.h"
#include "hydraulis/data/lengths.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  fuzz::ExpectValidOrInvalidInput([&] {
    for (std::int64_t length : ParseLengths(fuzz::AsText(data, size), "lengths.txt")) {
      fuzz::Require(length >= 1, "every parsed length >= 1");
    }
  });
  return 0;
}
