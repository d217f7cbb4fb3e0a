// JSON-lines corpora read for their lengths: ParseJsonLinesLengths with a length field, and
// with a text field counted in UTF-8 bytes and in whitespace words (first byte picks).
#include "fuzz_input.h"
#include "hydraulis/data/json_lines.h"
#include "hydraulis/data/length_source.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  if (size == 0) return 0;
  LengthSourceOptions options;
  switch (data[0] % 4) {
    case 0:
      options.length_field = "length";
      break;
    case 1:
      options.text_field = "text";
      break;
    case 2:
      options.text_field = "text";
      options.count_tokens = CountWhitespaceWords;
      break;
    default:
      options.text_field = "text";
      options.skip_empty = true;
  }
  fuzz::ExpectValidOrInvalidInput([&] {
    for (std::int64_t length :
         ParseJsonLinesLengths(fuzz::AsText(data + 1, size - 1), "data.jsonl", options)) {
      fuzz::Require(length >= 1, "every parsed length >= 1");
    }
  });
  return 0;
}
