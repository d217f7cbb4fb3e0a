#include "hydraulis/runtime/job/evaluation.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <optional>
#include <span>
#include <utility>

#include "hydraulis/base/error.h"
#include "hydraulis/checkpoint/hf_checkpoint.h"
#include "hydraulis/checkpoint/safetensors.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/runtime/model/memory_fit.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {
namespace {

// The first `options.max_documents` documents of 2 tokens or more, each cut to max_len.
std::vector<std::vector<std::int64_t>> EvaluatedDocuments(const MegatronDataset& data,
                                                          const EvaluationOptions& options) {
  std::vector<std::vector<std::int64_t>> documents;
  const auto max_documents = static_cast<std::size_t>(options.max_documents);
  const auto max_len = static_cast<std::size_t>(options.max_len);
  for (std::size_t i = 0; i < data.num_documents() && documents.size() < max_documents; ++i) {
    std::vector<std::int64_t> doc = data.Document(i);
    if (doc.size() > max_len) doc.resize(max_len);
    if (doc.size() >= 2) documents.push_back(std::move(doc));  // a loss needs a target
  }
  if (documents.empty()) throw InvalidInput(options.data + ": no document of 2 tokens or more");
  return documents;
}

void WriteLogits(const std::string& path, const at::Tensor& logits, const PackedBatch& batch) {
  const std::vector<std::int64_t>& cu = batch.cu_seqlens;
  WriteSafetensors(path, {{"logits", SafetensorsDType::kF32, logits.sizes().vec(),
                           std::span(static_cast<const std::byte*>(logits.data_ptr()),
                                     static_cast<std::size_t>(logits.nbytes()))},
                          {"cu_seqlens",
                           SafetensorsDType::kI64,
                           {static_cast<std::int64_t>(cu.size())},
                           std::as_bytes(std::span(cu))}});
}

}  // namespace

void CheckEvaluationWeightsFit(const ModelConfig& config, const ComputeOptions& compute) {
  const bool bf16 = compute.precision == Precision::kBf16;
  CheckModelMemoryFits(config, bf16 ? 2.0 : 4.0,
                       std::string("for its weights (") + (bf16 ? "bf16, 2" : "fp32, 4") +
                           " bytes per parameter; eval holds no gradients or optimizer state)",
                       compute);
}

Evaluation Evaluate(const EvaluationOptions& options) {
  if (options.init_from.empty() == options.model.empty()) {
    throw InvalidInput("eval: give --init-from (a Hugging Face checkpoint) or --model, not both");
  }
  if (options.max_documents < 1 || options.max_len < 1) {
    throw InvalidInput("eval: max_documents and max_len must be >= 1");
  }
  std::optional<HfCheckpoint> checkpoint;
  ModelConfig config;
  if (!options.init_from.empty()) {
    checkpoint.emplace(options.init_from);
    config = checkpoint->config();
  } else {
    config = LoadModelConfig(options.model);
  }
  RequireWithinSlidingWindow(
      config, options.max_len, "--max-len",
      options.init_from.empty() ? options.model : options.init_from + "/config.json");
  ComputeOptions compute;
  compute.precision = options.precision;
  // Before the data is read and the model built: a model too large is refused by its size.
  CheckEvaluationWeightsFit(config, compute);
  const MegatronDataset data(options.data);
  data.RequireIdsInVocabulary(config.shape.vocab, options.init_from.empty()
                                                      ? options.model
                                                      : options.init_from + "/config.json");
  const std::vector<std::vector<std::int64_t>> documents = EvaluatedDocuments(data, options);
  const Transformer model(config, options.seed, nullptr, {}, compute,
                          checkpoint ? HfInitialWeights(*checkpoint) : InitialWeights());
  const PackedBatch batch = PackDocuments(documents, config.shape.vocab);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.Forward(batch).to(at::kFloat).contiguous();
  Evaluation evaluation;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    const std::int64_t begin = batch.cu_seqlens[d], end = batch.cu_seqlens[d + 1];
    const at::Tensor rows = logits.slice(0, begin, end - 1);
    const at::Tensor targets = batch.tokens.slice(0, begin + 1, end);
    evaluation.documents.push_back(
        {end - begin, at::cross_entropy_loss(rows, targets).item<double>()});
  }
  if (!options.logits_file.empty()) WriteLogits(options.logits_file, logits, batch);
  return evaluation;
}

}  // namespace hydraulis
