// Evaluation of a model on a dataset: each document's mean next-token loss, e.g. of a
// Hugging Face checkpoint (docs/runtime.md, "Hugging Face formats"), with the documents
// packed into one micro-batch as training packs them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {

struct EvaluationOptions {
  // The model: exactly one of a Hugging Face checkpoint directory (config.json +
  // safetensors weights) or a model config file whose weights are drawn from `seed`.
  std::string init_from;
  std::string model;
  std::uint64_t seed = 1;
  std::string data;        // Megatron dataset prefix (PREFIX.bin / PREFIX.idx)
  int max_documents = 16;  // documents evaluated, the first in file order, >= 1
  int max_len = 1024;      // each document is cut to this many tokens, >= 1
  // Of the weights and the compute, on the CPU (bf16 halves the weights' memory); losses and
  // logits are computed in fp32.
  Precision precision = Precision::kFp32;
  // Non-empty: the packed batch's logits (F32 [tokens, vocab]) and cu_seqlens (I64) are
  // also written to this .safetensors file.
  std::string logits_file;
};

// One evaluated document.
struct DocumentLoss {
  std::int64_t tokens = 0;  // after the cut to max_len, >= 2
  double loss = 0;          // mean cross-entropy over its tokens - 1 next-token targets
};

struct Evaluation {
  // In file order; documents shorter than 2 tokens (no target) are skipped and not counted.
  std::vector<DocumentLoss> documents;
};

// Evaluates the model of `options` on the first max_documents documents of 2 tokens or more
// (after the cut) of options.data. InvalidInput when both or neither of init_from and model
// are given, a file is missing or malformed, the model's weights do not fit this machine
// (CheckEvaluationWeightsFit), a token id is outside the model's vocabulary, or no document
// has 2 tokens.
Evaluation Evaluate(const EvaluationOptions& options);

// InvalidInput, before anything is allocated, when the model's weights alone (4 bytes per
// parameter in fp32, 2 in bf16) exceed the memory of `compute`'s device: eval runs forward
// only, so it holds no gradients and no optimizer state, and its bound is that of the
// weights, not train's training state (CheckModelMemoryFits).
void CheckEvaluationWeightsFit(const ModelConfig& config, const ComputeOptions& compute);

}  // namespace hydraulis
