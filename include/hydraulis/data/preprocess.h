// Preprocessing: a JSON-lines corpus tokenized into a Megatron-LM indexed dataset
// (PREFIX.bin + PREFIX.idx), the training data format.
#pragma once

#include <cstdint>
#include <string>

#include "hydraulis/data/megatron_index.h"
#include "hydraulis/data/tokenizer.h"

namespace hydraulis {

struct PreprocessOptions {
  // JSON lines, one object per line (JsonLinesTextReader).
  std::string input;
  // Output files PREFIX.bin and PREFIX.idx.
  std::string output_prefix;
  // The string field holding each document's text.
  std::string json_key = "text";
  // Stop after this many documents are written (>= 0; 0: the whole input). Lines after
  // the last document read are not looked at.
  std::int64_t max_documents = 0;
  // Append the tokenizer's end-of-document id to every document (InvalidInput when the
  // tokenizer has none).
  bool append_eod = false;
};

// What PreprocessJsonLines wrote.
struct PreprocessResult {
  std::int64_t documents = 0;                    // documents written, each with >= 1 token
  std::int64_t tokens = 0;                       // tokens written
  std::int64_t empty_skipped = 0;                // documents with no tokens, not written
  MegatronDType dtype = MegatronDType::kUInt16;  // MegatronDTypeForVocab(vocab_size)
};

// Tokenizes every document of options.input with `tokenizer` and writes the dataset with
// MegatronDatasetWriter, one document per sequence. Documents with no tokens (empty
// texts) are skipped and counted: Megatron-LM would keep them, but they carry nothing to
// train on and the length readers reject them. Atomic: on any InvalidInput (the input's
// file and line, the options, an I/O error; "<input>: no documents with tokens" when
// every document is empty) existing output files are left as they were.
PreprocessResult PreprocessJsonLines(const PreprocessOptions& options, const Tokenizer& tokenizer);

}  // namespace hydraulis
