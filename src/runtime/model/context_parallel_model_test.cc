// The whole tiny model on context-parallel ranks (real Gloo ranks as threads): each rank
// embeds its local tokens, runs the layers with ContextParallelAttention and sums the loss
// of its own targets; the ranks' losses, target counts and parameter gradients summed over
// the ranks equal one process's on the whole micro-batch. This checks the local tokens,
// positions and targets together with the attention, as the trainer will use them.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/local_tokens.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/spec/model_config.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/test_documents.h"

namespace hydraulis {
namespace {

struct StageOutcome {
  double loss = 0.0;
  std::int64_t targets = 0;
  std::vector<at::Tensor> grads;  // in named_parameters order
};

StageOutcome Backward(const Transformer& model, const TokenLoss& loss) {
  loss.sum.backward();
  StageOutcome o;
  o.loss = loss.sum.item<double>();
  o.targets = loss.tokens;
  for (const NamedParameter& p : model.named_parameters())
    o.grads.push_back(p.value.grad().clone());
  return o;
}

void ExpectCpModelMatchesOneProcess(int cp, const std::vector<int>& lengths, const CpLayout& layout,
                                    std::int64_t pad_multiple) {
  const ModelConfig c =
      LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
  const PackedBatch batch = PackDocuments(
      test_support::RandomDocuments(lengths, 17, static_cast<int>(c.shape.vocab)), c.shape.vocab);
  Transformer reference_model(c, 11);
  const StageOutcome reference =
      Backward(reference_model, SummedTokenLoss(reference_model.Forward(batch), batch));

  const std::vector<std::int64_t> lengths64(lengths.begin(), lengths.end());
  std::vector<StageOutcome> ranks(static_cast<std::size_t>(cp));
  const int port = test_support::FreePort();
  test_support::OnThreads(cp, [&](int r) {
    DistributedOptions o;
    o.rank = r;
    o.world_size = cp;
    o.master_port = port;
    o.timeout = std::chrono::seconds(30);
    Rendezvous rendezvous(o);
    std::unique_ptr<CommGroup> group = MakeCommGroup(rendezvous, "cp");
    const Transformer model(c, 11);
    const LocalTokenLayout local = MakeLocalTokenLayout(lengths64, layout, cp, r, pad_multiple);
    const LocalTokens tokens = LocalTokensOf(batch.tokens, local);
    const ContextParallelRows rows = MakeContextParallelRows(local, at::kCPU);
    const at::Tensor logits = model.ForwardStageContextParallel(tokens, rows, *group, {});
    ranks[static_cast<std::size_t>(r)] = Backward(model, SummedTokenLoss(logits, tokens.targets));
    group->Barrier();
  });

  double loss = 0.0;
  std::int64_t targets = 0;
  for (const StageOutcome& o : ranks) {
    loss += o.loss;
    targets += o.targets;
  }
  EXPECT_EQ(targets, batch.num_targets());
  EXPECT_NEAR(loss, reference.loss, 1e-5 * reference.loss);
  // Per parameter: max |sum over ranks - reference| / max |reference|.
  double worst = 0.0;
  const auto& names = reference_model.named_parameters();
  for (std::size_t i = 0; i < reference.grads.size(); ++i) {
    at::Tensor sum = at::zeros_like(reference.grads[i]);
    for (const StageOutcome& o : ranks) sum += o.grads[i];
    const double scale = reference.grads[i].abs().max().item<double>();
    ASSERT_GT(scale, 0.0) << names[i].name;
    const double error = (sum - reference.grads[i]).abs().max().item<double>() / scale;
    EXPECT_LE(error, 1e-5) << names[i].name;
    worst = std::max(worst, error);
  }
  std::cout << "[ cp=" << cp << " model ] loss " << loss << " vs " << reference.loss
            << ", max relative gradient error " << worst << "\n";
}

TEST(ContextParallelModelTest, TwoRanksTrainLikeOneProcess) {
  ExpectCpModelMatchesOneProcess(
      2, {37, 5, 20, 2, 64}, CpLayoutFromPlaces({{kSharded}, {0}, {kSharded}, {1}, {kSharded}}, 2),
      1);
}

TEST(ContextParallelModelTest, ThreeRanksWithPaddingTrainLikeOneProcess) {
  ExpectCpModelMatchesOneProcess(
      3, {41, 3, 26, 9, 1}, CpLayoutFromPlaces({{kSharded}, {2}, {kSharded}, {0}, {kSharded}}, 3),
      4);
}

}  // namespace
}  // namespace hydraulis
