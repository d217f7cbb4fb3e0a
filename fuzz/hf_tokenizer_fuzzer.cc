// Hugging Face tokenizer.json and text: the input is the file and a text separated by two
// NUL bytes. Loads the tokenizer (HfTokenizer::Parse: patterns compiled by PCRE2 after
// adaptation, merges, added tokens, templates) and encodes the text; every id must be
// below the vocabulary size, and encoding must be deterministic.
#include "fuzz_input.h"
#include "hydraulis/data/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  const std::string input = fuzz::AsText(data, size);
  const std::vector<std::string_view> files = fuzz::SplitAtNulPairs(input, 2);
  if (files.empty()) return 0;
  fuzz::ExpectValidOrInvalidInput([&] {
    const HfTokenizer tokenizer = HfTokenizer::Parse(files[0], "tokenizer.json");
    const std::string_view text = files[1];
    const std::vector<std::int64_t> ids = tokenizer.Encode(text);
    for (std::int64_t id : ids) {
      fuzz::Require(id >= 0 && id < tokenizer.vocab_size(), "ids inside the vocabulary");
    }
    fuzz::Require(tokenizer.Encode(text) == ids, "the same ids for the same text");
  });
  return 0;
}
