// `hydraulis preprocess`: a JSON-lines corpus tokenized into a Megatron-LM indexed dataset
// (PREFIX.bin + PREFIX.idx), the data the trainer reads.
#include <fmt/core.h>

#include <memory>
#include <string>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/hf_tokenizer.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/data/preprocess.h"
#include "hydraulis/data/tokenizer.h"
#include "output_paths.h"

namespace hydraulis::tools {
namespace {

struct PreprocessArgs {
  PreprocessOptions options;
  std::string tokenizer = "byte";
  std::string vocab_file;
  std::string merge_file;
};

std::unique_ptr<Tokenizer> MakeTokenizer(const PreprocessArgs& a) {
  const bool has_files = !a.vocab_file.empty() || !a.merge_file.empty();
  if (a.tokenizer == "byte") {
    if (has_files) {
      throw InvalidInput("--vocab-file/--merge-file: only for --tokenizer gpt2");
    }
    return std::make_unique<ByteTokenizer>();
  }
  if (a.tokenizer == "gpt2") {
    if (a.vocab_file.empty() || a.merge_file.empty()) {
      throw InvalidInput(
          "--tokenizer gpt2: needs --vocab-file (vocab.json) and --merge-file "
          "(merges.txt)");
    }
    return std::make_unique<Gpt2BpeTokenizer>(a.vocab_file, a.merge_file);
  }
  if (a.tokenizer.ends_with(".json")) {
    if (has_files) {
      throw InvalidInput("--vocab-file/--merge-file: only for --tokenizer gpt2 (" + a.tokenizer +
                         " holds its vocabulary and merges)");
    }
    return std::make_unique<HfTokenizer>(HfTokenizer::Load(a.tokenizer));
  }
  throw InvalidInput("--tokenizer: unknown tokenizer " + QuoteForMessage(a.tokenizer) +
                     " (expected byte, gpt2, or a Hugging Face tokenizer.json)");
}

int RunPreprocess(const PreprocessArgs& a) {
  for (const char* extension : {".bin", ".idx"}) {
    RefuseOutputOverInput({"--output-prefix", a.options.output_prefix + extension},
                          {{"--input", a.options.input},
                           {"--tokenizer", a.tokenizer},
                           {"--vocab-file", a.vocab_file},
                           {"--merge-file", a.merge_file}});
  }
  if (a.options.max_documents < 0) {
    throw InvalidInput("--max-documents: must be >= 0 (0: all), got " +
                       std::to_string(a.options.max_documents));
  }
  const std::unique_ptr<Tokenizer> tokenizer = MakeTokenizer(a);
  if (a.options.append_eod && !tokenizer->eod_id()) {
    throw InvalidInput("--append-eod: the " + a.tokenizer + " tokenizer has no end-of-document id" +
                       (a.tokenizer.ends_with(".json")
                            ? " (no tokenizer_config.json with an eos_token beside it)"
                            : ""));
  }
  const PreprocessResult r = PreprocessJsonLines(a.options, *tokenizer);
  const std::string& prefix = a.options.output_prefix;
  fmt::print(
      "wrote {}.bin and {}.idx: {} documents, {} tokens, dtype {}, {} empty documents "
      "skipped\n",
      prefix, prefix, r.documents, r.tokens, MegatronDTypeName(r.dtype), r.empty_skipped);
  return 0;
}

}  // namespace

Command AddPreprocessCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "preprocess", "Tokenize a JSON-lines corpus into a Megatron-LM dataset (PREFIX.bin/.idx)");
  auto a = std::make_shared<PreprocessArgs>();
  cmd->add_option("--input", a->options.input, "JSON lines, one object per line")->required();
  cmd->add_option("--output-prefix", a->options.output_prefix,
                  "writes PREFIX.bin and PREFIX.idx (atomically)")
      ->required()
      ->check(NonEmptyPath());
  cmd->add_option("--json-key", a->options.json_key, "the string field holding the text")
      ->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "byte (UTF-8 bytes, vocabulary 256), gpt2 (byte-level BPE from "
                  "--vocab-file/--merge-file), or FILE.json (a Hugging Face tokenizer.json "
                  "of the byte-level BPE family; docs/runtime.md)")
      ->capture_default_str();
  cmd->add_option("--vocab-file", a->vocab_file, "gpt2: the vocab.json");
  cmd->add_option("--merge-file", a->merge_file, "gpt2: the merges.txt");
  cmd->add_option("--max-documents", a->options.max_documents,
                  "stop after this many documents (0: all)")
      ->capture_default_str();
  cmd->add_flag("--append-eod", a->options.append_eod,
                "append the tokenizer's end-of-document id (gpt2: <|endoftext|>; FILE.json: "
                "eos_token of the tokenizer_config.json beside it) to each document");
  return [a] { return RunPreprocess(*a); };
}

}  // namespace hydraulis::tools
