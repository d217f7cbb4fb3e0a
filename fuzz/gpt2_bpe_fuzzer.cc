// GPT-2 byte-level BPE files and text: the input is vocab.json, merges.txt and a text,
// separated by two NUL bytes each. Loads the tokenizer (Gpt2BpeTokenizer::Parse) and
// encodes the text; every id must be below the vocabulary size.
#include "fuzz_input.h"
#include "hydraulis/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  const std::string input = fuzz::AsText(data, size);
  const std::string separator("\0\0", 2);
  const std::size_t a = input.find(separator);
  if (a == std::string::npos) return 0;
  const std::size_t b = input.find(separator, a + 2);
  if (b == std::string::npos) return 0;
  fuzz::ExpectValidOrInvalidInput([&] {
    const Gpt2BpeTokenizer tokenizer = Gpt2BpeTokenizer::Parse(
        input.substr(0, a), "vocab.json", input.substr(a + 2, b - a - 2), "merges.txt");
    for (std::int64_t id : tokenizer.Encode(std::string_view(input).substr(b + 2))) {
      fuzz::Require(id >= 0 && id < tokenizer.vocab_size(), "ids inside the vocabulary");
    }
  });
  return 0;
}
