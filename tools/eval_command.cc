// `hydraulis eval`: per-document next-token loss of a model on a Megatron dataset, e.g. of
// a Hugging Face checkpoint (--init-from), one JSON line per document. With --logits it
// also writes the packed batch's logits, which the parity test compares with transformers.
#include <fmt/core.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/checkpoint/hf_checkpoint.h"
#include "hydraulis/checkpoint/safetensors.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis::tools {
namespace {

struct EvalArgs {
  std::string init_from;
  std::string model;
  std::uint64_t seed = 1;
  std::string data;
  int max_documents = 16;
  int max_len = 1024;
  std::string logits;
  std::string precision = "fp32";
};

int RunEval(const EvalArgs& a) {
  if (a.init_from.empty() == a.model.empty()) {
    throw InvalidInput("eval: give --init-from (a Hugging Face checkpoint) or --model, not both");
  }
  std::optional<HfCheckpoint> checkpoint;
  ModelConfig config;
  if (!a.init_from.empty()) {
    checkpoint.emplace(a.init_from);
    config = checkpoint->config();
  } else {
    config = LoadModelConfig(a.model);
  }
  const MegatronDataset data(a.data);
  data.RequireIdsInVocabulary(config.shape.vocab,
                              a.init_from.empty() ? a.model : a.init_from + "/config.json");
  std::vector<std::vector<std::int64_t>> documents;
  for (std::size_t i = 0;
       i < data.num_documents() && documents.size() < static_cast<std::size_t>(a.max_documents);
       ++i) {
    std::vector<std::int64_t> doc = data.Document(i);
    if (doc.size() > static_cast<std::size_t>(a.max_len))
      doc.resize(static_cast<std::size_t>(a.max_len));
    if (doc.size() >= 2) documents.push_back(std::move(doc));  // a loss needs a target
  }
  if (documents.empty()) throw InvalidInput(a.data + ": no document of 2 tokens or more");
  ComputeOptions compute;  // on the CPU; bf16 halves the weights' memory (a 7B in 14 GB)
  compute.precision = ParsePrecision(a.precision, "--precision");
  const Transformer model(config, a.seed, nullptr, {}, compute,
                          checkpoint ? HfInitialWeights(*checkpoint) : InitialWeights());
  const PackedBatch batch = PackDocuments(documents, config.shape.vocab);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.Forward(batch).to(at::kFloat).contiguous();
  std::string out;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    const std::int64_t begin = batch.cu_seqlens[d], end = batch.cu_seqlens[d + 1];
    const at::Tensor rows = logits.slice(0, begin, end - 1);
    const at::Tensor targets = batch.tokens.slice(0, begin + 1, end);
    const double loss = at::cross_entropy_loss(rows, targets).item<double>();
    nlohmann::json j;
    j["document"] = d;
    j["tokens"] = end - begin;
    j["loss"] = loss;
    out += j.dump() + "\n";
  }
  if (!a.logits.empty()) {
    const std::vector<std::int64_t> cu = batch.cu_seqlens;
    WriteSafetensors(a.logits, {{"logits", SafetensorsDType::kF32, logits.sizes().vec(),
                                 std::span(static_cast<const std::byte*>(logits.data_ptr()),
                                           static_cast<std::size_t>(logits.nbytes()))},
                                {"cu_seqlens",
                                 SafetensorsDType::kI64,
                                 {static_cast<std::int64_t>(cu.size())},
                                 std::as_bytes(std::span(cu))}});
  }
  fmt::print("{}", out);
  return 0;
}

}  // namespace

Command AddEvalCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eval", "Per-document loss of a model (e.g. a Hugging Face checkpoint) on a dataset");
  auto a = std::make_shared<EvalArgs>();
  cmd->add_option("--init-from", a->init_from,
                  "Hugging Face checkpoint directory (config.json + safetensors weights)");
  cmd->add_option("--model", a->model, "model config JSON, with weights drawn from --seed");
  cmd->add_option("--seed", a->seed, "initialisation seed with --model")->capture_default_str();
  cmd->add_option("--data", a->data, "Megatron dataset prefix (PREFIX.bin/.idx)")->required();
  cmd->add_option("--max-documents", a->max_documents, "documents evaluated, in file order")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-len", a->max_len, "documents are cut to this many tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--precision", a->precision,
                  "fp32 or bf16 (weights and compute; losses and logits in fp32)")
      ->capture_default_str();
  cmd->add_option("--logits", a->logits,
                  "also write the packed batch's logits and cu_seqlens to this .safetensors file");
  return [a] { return RunEval(*a); };
}

}  // namespace hydraulis::tools
