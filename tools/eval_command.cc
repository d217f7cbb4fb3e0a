// `hydraulis eval`: per-document next-token loss of a model on a Megatron dataset, e.g. of
// a Hugging Face checkpoint (--init-from), one JSON line per document; the driver is
// job/evaluation.h. With --logits it also writes the packed batch's logits, which the parity
// test compares with transformers.
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "hydraulis/runtime/job/evaluation.h"
#include "hydraulis/runtime/model/compute.h"
#include "output_paths.h"
#include "parsed_option.h"

namespace hydraulis::tools {
namespace {

int RunEval(const EvaluationOptions& options) {
  // Before the model is loaded and run, not at the end.
  if (!options.logits_file.empty()) RequireWritableFile({"--logits", options.logits_file});
  const Evaluation evaluation = Evaluate(options);
  std::string out;
  for (std::size_t d = 0; d < evaluation.documents.size(); ++d) {
    nlohmann::json j;
    j["document"] = d;
    j["tokens"] = evaluation.documents[d].tokens;
    j["loss"] = evaluation.documents[d].loss;
    out += j.dump() + "\n";
  }
  fmt::print("{}", out);
  return 0;
}

}  // namespace

Command AddEvalCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", RuntimeCommandSummary("eval"));
  auto o = std::make_shared<EvaluationOptions>();
  cmd->add_option("--init-from", o->init_from,
                  "Hugging Face checkpoint directory (config.json + safetensors weights)");
  cmd->add_option("--model", o->model, "model config JSON, with weights drawn from --seed");
  cmd->add_option("--seed", o->seed, "initialisation seed with --model")->capture_default_str();
  cmd->add_option("--data", o->data, "Megatron dataset prefix (PREFIX.bin/.idx)")->required();
  cmd->add_option("--max-documents", o->max_documents, "documents evaluated, in file order")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-len", o->max_len, "documents are cut to this many tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  AddParsedOption(
      cmd, "--precision", o->precision,
      [](const std::string& text) { return ParsePrecision(text, "--precision"); },
      "fp32 or bf16 (weights and compute; losses and logits in fp32)", ToString(o->precision));
  cmd->add_option("--logits", o->logits_file,
                  "also write the packed batch's logits and cu_seqlens to this .safetensors file")
      ->check(NonEmptyPath());
  return [o] { return RunEval(*o); };
}

}  // namespace hydraulis::tools
