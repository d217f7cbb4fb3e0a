// Activation recomputation in one process: the gradients are those of the model that keeps
// every activation, and the memory the backward needs falls as the engine's memory model
// says (its activation bytes per token under each mode).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hydraulis/runtime/job/stage_profiler.h"
#include "hydraulis/runtime/model/gradients.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "recomputed.h"
#include "runtime/testing/test_documents.h"

namespace hydraulis {
namespace {

using test_support::Documents;
using test_support::RandomDocuments;

// Eight layers, so that what full recomputation keeps (each layer's input, one layer's
// activations at a time) is far from what the layers keep without it.
ModelConfig Deep() {
  ModelConfig c;
  c.shape.layers = 8;
  c.shape.hidden = 64;
  c.shape.ffn = 172;
  c.shape.heads = 4;
  c.shape.kv_heads = 4;
  c.shape.vocab = 64;
  return c;
}

// Each parameter's gradient after the summed loss of `batch`.
std::vector<at::Tensor> Gradients(const ModelConfig& c, Recompute mode, const PackedBatch& batch) {
  ComputeOptions compute;
  compute.recompute = mode;
  Transformer model(c, 5, nullptr, {}, compute);
  ZeroGradients(model);
  SummedTokenLoss(model.Forward(batch), batch).sum.backward();
  std::vector<at::Tensor> out;
  for (const NamedParameter& p : model.named_parameters()) out.push_back(GradientOf(p).clone());
  return out;
}

class RecomputedTest : public ::testing::TestWithParam<Recompute> {};

TEST_P(RecomputedTest, GradientsEqualThoseWithoutRecomputation) {
  const ModelConfig c = Deep();
  const Documents docs = RandomDocuments({37, 5, 64, 1, 20}, 9, c.shape.vocab);
  const PackedBatch batch = PackDocuments(docs, c.shape.vocab);
  const std::vector<at::Tensor> kept = Gradients(c, Recompute::kNone, batch);
  const std::vector<at::Tensor> again = Gradients(c, GetParam(), batch);
  ASSERT_EQ(kept.size(), again.size());
  for (std::size_t i = 0; i < kept.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    ASSERT_GT(kept[i].abs().max().item<double>(), 0.0);  // every parameter is reached
    EXPECT_LE((kept[i] - again[i]).abs().max().item<double>(), 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, RecomputedTest,
                         ::testing::Values(Recompute::kSelective, Recompute::kFull),
                         [](const auto& mode) { return ToString(mode.param); });

// The CPU allocator, counting the bytes it holds and their peak.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(std::size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* block = new Block{std::move(inner), n, this};
    const std::int64_t now = held_ += static_cast<std::int64_t>(n);
    std::int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {data, block, &Free, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  std::int64_t held() const { return held_; }
  // The peak since the last call, which starts the next span at what is held now.
  std::int64_t TakePeak() { return peak_.exchange(held_.load()); }

 private:
  struct Block {
    c10::DataPtr inner;
    std::size_t bytes;
    CountingAllocator* owner;
  };
  static void Free(void* context) {
    auto* block = static_cast<Block*>(context);
    block->owner->held_ -= static_cast<std::int64_t>(block->bytes);
    delete block;
  }

  c10::Allocator* base_;
  std::atomic<std::int64_t> held_{0}, peak_{0};
};

// Bytes above what was held before the forward, at the peak of forward and backward.
std::int64_t BackwardPeak(const ModelConfig& c, Recompute mode, const PackedBatch& batch,
                          CountingAllocator& counter) {
  ComputeOptions compute;
  compute.recompute = mode;
  Transformer model(c, 5, nullptr, {}, compute);
  ZeroGradients(model);
  const std::int64_t before = counter.held();
  counter.TakePeak();
  SummedTokenLoss(model.Forward(batch), batch).sum.backward();
  return counter.TakePeak() - before;
}

// What each mode saves against keeping everything, measured by the allocator's peak over a
// forward and backward, equals what the memory model charges per token (layers x hidden x
// A) within 15 %. The logits and the backward's own temporaries are the same in every mode
// and cancel in the difference. The model is the one of the path this runs (the CPU's
// attention core, not flash).
TEST(RecomputedMemoryTest, PeakFallsAsTheMemoryModelSays) {
  const ModelConfig c = Deep();
  const Documents docs = RandomDocuments({700, 300, 1000}, 4, c.shape.vocab);
  const PackedBatch batch = PackDocuments(docs, c.shape.vocab);
  const double tokens = static_cast<double>(batch.num_tokens());
  static CountingAllocator counter(c10::GetCPUAllocator());
  c10::Allocator* previous = c10::GetCPUAllocator();
  c10::SetCPUAllocator(&counter, /*priority=*/100);
  std::int64_t none = 0, selective = 0, full = 0;
  try {
    none = BackwardPeak(c, Recompute::kNone, batch, counter);
    selective = BackwardPeak(c, Recompute::kSelective, batch, counter);
    full = BackwardPeak(c, Recompute::kFull, batch, counter);
  } catch (...) {
    c10::SetCPUAllocator(previous, 100);
    throw;
  }
  c10::SetCPUAllocator(previous, 100);
  auto modelled = [&](Recompute mode) {
    return tokens * c.shape.layers * c.shape.hidden *
           ActivationBytesPerTokenHiddenLayer(c, 1, mode, /*flash_attention=*/false);
  };
  const double model_full = modelled(Recompute::kNone) - modelled(Recompute::kFull);
  const double model_selective = modelled(Recompute::kNone) - modelled(Recompute::kSelective);
  std::cout << "peak above the model's state: none " << none << ", selective " << selective
            << ", full " << full << " bytes; saved: selective " << none - selective << " (model "
            << model_selective << "), full " << none - full << " (model " << model_full << ")\n";
  EXPECT_NEAR(static_cast<double>(none - full) / model_full, 1.0, 0.15);
  EXPECT_NEAR(static_cast<double>(none - selective) / model_selective, 1.0, 0.15);
}

}  // namespace
}  // namespace hydraulis
