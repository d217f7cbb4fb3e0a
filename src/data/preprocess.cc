#include "hydraulis/data/preprocess.h"

#include <optional>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/data/json_lines_text.h"
#include "hydraulis/data/megatron_dataset.h"

namespace hydraulis {

PreprocessResult PreprocessJsonLines(const PreprocessOptions& options, const Tokenizer& tokenizer) {
  if (options.max_documents < 0) {
    throw InvalidInput("max_documents: must be >= 0 (0: all), got " +
                       std::to_string(options.max_documents));
  }
  if (options.output_prefix.empty()) throw InvalidInput("output prefix: empty");
  const std::optional<std::int64_t> eod = tokenizer.eod_id();
  if (options.append_eod && !eod) {
    throw InvalidInput("append_eod: the tokenizer has no end-of-document id");
  }
  PreprocessResult result;
  result.dtype = MegatronDTypeForVocab(tokenizer.vocab_size());
  JsonLinesTextReader reader(options.input, options.json_key);
  MegatronDatasetWriter writer(options.output_prefix, result.dtype);
  std::string text;
  while ((options.max_documents == 0 || writer.num_documents() < options.max_documents) &&
         reader.Next(text)) {
    std::vector<std::int64_t> ids = tokenizer.Encode(text);
    if (ids.empty()) {
      ++result.empty_skipped;
      continue;
    }
    if (options.append_eod) ids.push_back(*eod);
    try {
      writer.AddDocument(ids);
    } catch (const InvalidInput& e) {
      throw InvalidInput(options.input + ":" + std::to_string(reader.line()) + ": " + e.what());
    }
  }
  if (writer.num_documents() == 0) {
    throw InvalidInput(options.input + ": no documents with tokens (" +
                       std::to_string(result.empty_skipped) + " empty)");
  }
  writer.Finish();
  result.documents = writer.num_documents();
  result.tokens = writer.num_tokens();
  return result;
}

}  // namespace hydraulis
