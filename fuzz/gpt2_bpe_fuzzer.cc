// GPT-2 byte-level BPE files and text: the input is vocab.json, merges.txt and a text,
// separated by two NUL bytes each. Loads the tokenizer (Gpt2BpeTokenizer::Parse) and
// encodes the text; every id must be below the vocabulary size.
#include "fuzz_input.h"
#include "hydraulis/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  const std::string input = fuzz::AsText(data, size);
  const std::vector<std::string_view> files = fuzz::SplitAtNulPairs(input, 3);
  if (files.empty()) return 0;
  fuzz::ExpectValidOrInvalidInput([&] {
    const Gpt2BpeTokenizer tokenizer = Gpt2BpeTokenizer::Parse(std::string(files[0]), "vocab.json",
                                                               std::string(files[1]), "merges.txt");
    for (std::int64_t id : tokenizer.Encode(files[2])) {
      fuzz::Require(id >= 0 && id < tokenizer.vocab_size(), "ids inside the vocabulary");
    }
  });
  return 0;
}
