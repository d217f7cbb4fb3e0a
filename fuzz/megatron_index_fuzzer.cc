// Megatron-LM .idx files: ParseMegatronIndex, then the document lengths with and without
// skipping empty documents.
#include <span>

#include "fuzz_input.h"
#include "hydraulis/data/megatron_index.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  fuzz::ExpectValidOrInvalidInput([&] {
    const MegatronIndex index =
        ParseMegatronIndex(std::as_bytes(std::span(data, size)), "data.idx");
    for (bool skip_empty : {false, true}) {
      fuzz::ExpectValidOrInvalidInput([&] {
        for (std::int64_t length : MegatronDocumentLengths(index, "data.idx", skip_empty)) {
          fuzz::Require(length >= 1, "every document length >= 1");
        }
      });
    }
  });
  return 0;
}
