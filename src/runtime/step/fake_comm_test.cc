// The in-process communicator (FakeCommWorld) and, through it, tensor parallelism and the
// ZeRO-1 optimizer driven from threads instead of processes, against single-process
// training; and bf16 mixed precision against fp32 on the CPU.
#include <gtest/gtest.h>

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/gradients.h"
#include "hydraulis/runtime/model/local_tokens.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/pipeline_stage.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"
#include "hydraulis/spec/model_config.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/reference_trainer.h"
#include "runtime/testing/test_documents.h"

namespace hydraulis {
namespace {

using test_support::Documents;
using test_support::OnThreads;
using test_support::RandomDocuments;

ModelConfig Tiny() {
  return LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
}

double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0.0 ? scale : 1.0);
}

TEST(FakeCommTest, CollectivesCombineEveryRankInOrder) {
  FakeCommWorld world(3);
  std::vector<at::Tensor> sums(3), maxes(3), shards(3), gathered(3), received(3);
  OnThreads(3, [&](int r) {
    auto g = world.Group(r, "all");
    EXPECT_EQ(g->rank(), r);
    EXPECT_EQ(g->size(), 3);
    at::Tensor t = at::full({2}, static_cast<double>(r + 1));
    g->AllReduceSum(t);
    sums[r] = t;
    at::Tensor m = at::tensor({static_cast<double>(r), static_cast<double>(-r)});
    g->AllReduceMax(m);
    maxes[r] = m;
    at::Tensor full = at::arange(6, at::kDouble) * (r + 1);
    at::Tensor shard = at::empty({2}, at::kDouble);
    g->ReduceScatterSum(full, shard);
    shards[r] = shard;
    at::Tensor all = at::empty({6}, at::kDouble);
    g->AllGather(at::full({2}, static_cast<double>(r), at::kDouble), all);
    gathered[r] = all;
    // A ring of point-to-point messages, two per pair, matched in order by tag.
    g->Send(at::full({1}, 10.0 * r), (r + 1) % 3, 7);
    g->Send(at::full({1}, 10.0 * r + 1), (r + 1) % 3, 7);
    at::Tensor a = at::empty({1}), b = at::empty({1});
    g->Recv(a, (r + 2) % 3, 7);
    g->Recv(b, (r + 2) % 3, 7);
    received[r] = at::cat({a, b});
    g->Barrier();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(at::equal(sums[r], at::full({2}, 6.0)));
    EXPECT_TRUE(at::equal(maxes[r], at::tensor({2.0, 0.0})));
    // Chunk r of (0..5) * (1 + 2 + 3).
    EXPECT_TRUE(at::equal(shards[r], at::arange(2 * r, 2 * r + 2, at::kDouble) * 6));
    EXPECT_TRUE(at::equal(gathered[r], at::tensor({0.0, 0.0, 1.0, 1.0, 2.0, 2.0}, at::kDouble)));
    const double from = 10.0 * ((r + 2) % 3);
    EXPECT_TRUE(at::equal(received[r], at::tensor({from, from + 1.0}).to(at::kFloat)));
  }
}

TEST(FakeCommTest, AMissingPeerIsAnErrorAfterTheTimeout) {
  FakeCommWorld world(2, std::chrono::milliseconds(50));
  auto g = world.Group(0, "pair");
  // A peer that never comes is an I/O failure, not a bug (the CLI exits 1 with the reason).
  EXPECT_THROW(g->AllReduceSum(at::ones({1})), IoError);
  EXPECT_THROW(g->Recv(at::empty({1}), 1, 0), IoError);
  EXPECT_THROW(world.Group(2, "pair"), InvalidInput);
  EXPECT_THROW(world.Group(0, "odd", {1}), InvalidInput);
}

const std::vector<int> kLengths = {9, 1, 30, 4, 17, 2, 11, 6};

// The fake communicator matches point-to-point operations as NCCL does, in each pair's
// issue order: two sides that disagree are an error at once, not a silent Gloo-style match.
TEST(FakeCommTest, PointToPointFollowsIssueOrderAsUnderNccl) {
  {
    // Both sides send first: under NCCL each send waits behind nothing but its peer's
    // receive, which comes after the peer's own send.
    FakeCommWorld world(2, std::chrono::milliseconds(2000));
    std::vector<std::string> errors(2);
    OnThreads(2, [&](int r) {
      auto g = world.Group(r, "pair");
      try {
        g->Send(at::full({4}, 1.0), 1 - r, r);
        at::Tensor in = at::empty({4});
        g->Recv(in, 1 - r, 1 - r);
      } catch (const InternalError& e) {
        errors[r] = e.what();
      }
    });
    EXPECT_NE(errors[0].find("both would wait for ever"), std::string::npos) << errors[0];
    EXPECT_NE(errors[1].find("both would wait for ever"), std::string::npos) << errors[1];
  }
  {
    // Both sides issuing one sequence (send, send, receive; receive, receive, send) is
    // fine, the second receive posted before the send it precedes and waited for after.
    FakeCommWorld world(2);
    std::vector<at::Tensor> got(2);
    OnThreads(2, [&](int r) {
      auto g = world.Group(r, "pair");
      if (r == 0) {
        g->Send(at::full({2}, 1.0), 1, 0);
        g->Send(at::full({2}, 2.0), 1, 2);
        at::Tensor back = at::empty({3});
        g->Recv(back, 1, 1);
        got[0] = back;
      } else {
        at::Tensor a = at::empty({2}), b = at::empty({2});
        g->Recv(a, 0, 0);
        auto second = g->RecvAsync(b, 0, 2);
        g->Send(at::full({3}, 5.0), 0, 1);
        second->Wait();
        got[1] = at::cat({a, b});
      }
      g->WaitSends();
    });
    EXPECT_TRUE(at::equal(got[0], at::full({3}, 5.0)));
    EXPECT_TRUE(at::equal(got[1], at::tensor({1.0f, 1.0f, 2.0f, 2.0f})));
  }
  {
    // Sizes or tags that differ at the heads are a wrong match.
    FakeCommWorld world(2, std::chrono::milliseconds(2000));
    std::vector<std::string> errors(2);
    OnThreads(2, [&](int r) {
      auto g = world.Group(r, "pair");
      try {
        if (r == 0) {
          g->Send(at::full({4}, 1.0), 1, 0);
          g->WaitSends();
        } else {
          g->Recv(at::empty({5}), 0, 0);
        }
      } catch (const InternalError& e) {
        errors[r] = e.what();
      }
    });
    EXPECT_NE(errors[1].find("do not match"), std::string::npos) << errors[1];
  }
}

// Pipeline stages on fake ranks (so every boundary's sends and receives are checked for
// NCCL's in-order matching, receives posted ahead included) against one process: for
// pp = 2..4 and any number of micro-batches, fewer than the stages included.
TEST(FakeCommTest, PipelineStagesMatchOneProcessUnderInOrderMatching) {
  ModelConfig c = Tiny();
  c.shape.layers = 4;
  const Documents docs = RandomDocuments(kLengths, 5, static_cast<int>(c.shape.vocab));
  for (int pp = 2; pp <= 4; ++pp) {
    for (int v : {1, 2, 3, 5, 8}) {
      std::vector<PackedBatch> mbs;
      for (int j = 0; j < v; ++j) {
        mbs.push_back(PackDocuments({docs[static_cast<std::size_t>(j)]}, c.shape.vocab));
      }
      std::int64_t targets = 0;
      for (const auto& mb : mbs) targets += mb.num_targets();
      Transformer reference(c, 11);
      const double reference_loss = ForwardBackward(reference, mbs, targets);  // summed
      FakeCommWorld world(pp);
      std::vector<double> loss(static_cast<std::size_t>(pp), 0.0);
      std::vector<double> worst(static_cast<std::size_t>(pp), 0.0);
      OnThreads(pp, [&](int r) {
        auto group = world.Group(r, "pipeline");
        const Transformer stage(c, 11, nullptr, ModelPart::Stage(c, r, pp));
        ZeroGradients(stage);
        StageLinks links{group.get(), r, pp, r > 0 ? r - 1 : -1, r + 1 < pp ? r + 1 : -1};
        const StageResult result = RunPipelineStage(stage, mbs, links, targets);
        loss[static_cast<std::size_t>(r)] = result.loss_sum;
        for (const NamedParameter& p : stage.named_parameters()) {
          for (const NamedParameter& q : reference.named_parameters()) {
            if (q.full_name != p.full_name) continue;
            worst[static_cast<std::size_t>(r)] = std::max(
                worst[static_cast<std::size_t>(r)], RelativeError(p.value.grad(), q.value.grad()));
          }
        }
      });
      EXPECT_NEAR(loss.back(), reference_loss, 1e-5 * reference_loss) << pp << " " << v;
      for (int r = 0; r < pp; ++r) {
        EXPECT_LT(worst[static_cast<std::size_t>(r)], 1e-5)
            << "pp " << pp << " v " << v << " stage " << r;
      }
    }
  }
}

// A context-parallel pipeline (cp = 2, pp = 2 and 3) on fake ranks: every cp rank runs its
// share of each micro-batch through the 1F1B schedule, sending its local rows to the peer
// of its own cp rank, so both the pipeline group's transfers (in-order matching, as NCCL
// needs) and the cp groups' gathers are checked. The cp ranks' losses and gradients of each
// stage add up to one process's. The micro-batches shard odd and short documents and give
// cp rank 1 no token of the last one.
TEST(FakeCommTest, ContextParallelPipelineStagesMatchOneProcess) {
  ModelConfig c = Tiny();
  c.shape.layers = 4;
  constexpr int cp = 2;
  const Documents docs = RandomDocuments(kLengths, 7, static_cast<int>(c.shape.vocab));
  // Documents of each micro-batch (indices into kLengths) and their layout.
  const std::vector<std::vector<int>> split = {{0, 1}, {2, 5, 6}, {3}, {4, 7}};
  const std::vector<CpLayout> layouts = {CpLayoutFromPlaces({{kSharded}, {0}}, cp),
                                         CpLayoutFromPlaces({{kSharded}, {kSharded}, {1}}, cp),
                                         CpLayoutFromPlaces({{0}}, cp),
                                         CpLayoutFromPlaces({{1}, {kSharded}}, cp)};
  std::vector<PackedBatch> mbs;
  std::vector<std::vector<std::int64_t>> lengths;
  for (const std::vector<int>& mb : split) {
    Documents d;
    lengths.emplace_back();
    for (int i : mb) {
      d.push_back(docs[static_cast<std::size_t>(i)]);
      lengths.back().push_back(kLengths[static_cast<std::size_t>(i)]);
    }
    mbs.push_back(PackDocuments(d, c.shape.vocab));
  }
  std::int64_t targets = 0;
  for (const auto& mb : mbs) targets += mb.num_targets();
  Transformer reference(c, 11);
  const double reference_loss = ForwardBackward(reference, mbs, targets);  // summed
  for (int pp = 2; pp <= 3; ++pp) {
    const int world_size = pp * cp;
    FakeCommWorld world(world_size);
    std::vector<double> loss(static_cast<std::size_t>(world_size), 0.0);
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(world_size), 0);
    // Per rank: its stage's parameter gradients, in named_parameters order.
    std::vector<std::vector<at::Tensor>> grads(static_cast<std::size_t>(world_size));
    OnThreads(world_size, [&](int r) {
      const int stage = r / cp, cp_rank = r % cp;
      auto pipeline = world.Group(r, "pipeline");
      auto cp_group = world.Group(r, "cp-" + std::to_string(stage), {stage * cp, stage * cp + 1});
      const Transformer model(c, 11, nullptr, ModelPart::Stage(c, stage, pp));
      ZeroGradients(model);
      std::vector<ContextParallelMicroBatch> shares;
      for (std::size_t j = 0; j < mbs.size(); ++j) {
        const LocalTokenLayout local = MakeLocalTokenLayout(lengths[j], layouts[j], cp, cp_rank);
        shares.push_back({LocalTokensOf(mbs[j].tokens, local),
                          MakeContextParallelRows(local, at::Device(at::kCPU))});
      }
      StageLinks links{pipeline.get(), stage, pp, stage > 0 ? r - cp : -1,
                       stage + 1 < pp ? r + cp : -1};
      const StageResult result = RunPipelineStage(model, shares, *cp_group, links, targets);
      loss[static_cast<std::size_t>(r)] = result.loss_sum;
      tokens[static_cast<std::size_t>(r)] = result.tokens;
      for (const NamedParameter& p : model.named_parameters()) {
        grads[static_cast<std::size_t>(r)].push_back(p.value.grad().clone());
      }
    });
    const int last = (pp - 1) * cp;
    EXPECT_NEAR(loss[static_cast<std::size_t>(last)] + loss[static_cast<std::size_t>(last + 1)],
                reference_loss, 1e-5 * reference_loss)
        << "pp " << pp;
    std::int64_t all_tokens = 0;
    for (const auto& mb : mbs) all_tokens += mb.num_tokens();
    for (int stage = 0; stage < pp; ++stage) {
      EXPECT_EQ(tokens[static_cast<std::size_t>(stage * cp)] +
                    tokens[static_cast<std::size_t>(stage * cp + 1)],
                all_tokens);
      const Transformer part(c, 11, nullptr, ModelPart::Stage(c, stage, pp));
      const auto& params = part.named_parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        const at::Tensor sum = grads[static_cast<std::size_t>(stage * cp)][i] +
                               grads[static_cast<std::size_t>(stage * cp + 1)][i];
        for (const NamedParameter& q : reference.named_parameters()) {
          if (q.full_name != params[i].full_name) continue;
          EXPECT_LT(RelativeError(sum, q.value.grad()), 1e-5)
              << "pp " << pp << " stage " << stage << " " << params[i].name;
        }
      }
    }
  }
}

// Gradients of a tensor-parallel model on 2 fake ranks equal the matching slices of the
// single-process model's gradients.
TEST(FakeCommTest, TensorParallelGradientsMatchOneProcess) {
  const ModelConfig c = Tiny();
  const Documents docs = RandomDocuments(kLengths, 3, static_cast<int>(c.shape.vocab));
  const std::vector<PackedBatch> mbs = {PackDocuments({docs[0], docs[1], docs[2]}, c.shape.vocab),
                                        PackDocuments({docs[3], docs[4]}, c.shape.vocab)};
  std::int64_t targets = 0;
  for (const auto& mb : mbs) targets += mb.num_targets();
  Transformer reference(c, 11);
  const double reference_loss = ForwardBackward(reference, mbs, targets);

  FakeCommWorld world(2);
  std::vector<double> losses(2);
  std::vector<double> worst(2, 0.0);
  OnThreads(2, [&](int r) {
    auto tp = world.Group(r, "tp");
    Transformer model(c, 11, tp.get());
    ZeroGradients(model);
    losses[r] = ForwardBackward(model, mbs, targets);
    for (std::size_t i = 0; i < model.named_parameters().size(); ++i) {
      const NamedParameter& p = model.named_parameters()[i];
      at::Tensor full = reference.named_parameters()[i].value.grad();
      if (p.split != TensorSplit::kReplicated) {
        const std::int64_t dim = p.split == TensorSplit::kRows ? 0 : 1;
        const std::int64_t part = full.size(dim) / 2;
        full = full.slice(dim, part * r, part * (r + 1));
      }
      worst[r] = std::max(worst[r], RelativeError(p.value.grad(), full));
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(losses[r], reference_loss, 1e-5 * reference_loss);
    EXPECT_LT(worst[r], 1e-5) << "rank " << r;
  }
}

// Three steps of the sharded optimizer over 2 fake data-parallel ranks (reduce-scatter of
// the gradients, all-gather of the parameters) equal single-process AdamW.
TEST(FakeCommTest, ShardedOptimizerOverTwoRanksMatchesOneProcess) {
  const ModelConfig c = Tiny();
  AdamWOptions adam;
  adam.lr = 1e-3;
  adam.weight_decay = 0.1;
  std::vector<Documents> batches;
  for (int s = 0; s < 3; ++s) {
    batches.push_back(RandomDocuments(kLengths, 20 + s, static_cast<int>(c.shape.vocab)));
  }
  Transformer reference(c, 11);
  ReferenceTrainer trainer(reference, adam);
  for (const Documents& docs : batches) {
    trainer.Step({PackDocuments(docs, c.shape.vocab)});
  }
  std::vector<at::Tensor> expected;
  for (const auto& p : reference.named_parameters()) expected.push_back(p.value.detach());

  // One bucket (the tiny model is far below the default), and buckets of 999 elements
  // (rounded to 1000: dozens of reduce-scatters and all-gathers per step).
  for (std::int64_t bucket : {kDefaultBucketElements, std::int64_t{999}}) {
    SCOPED_TRACE("buckets of " + std::to_string(bucket));
    FakeCommWorld world(2);
    std::vector<at::Tensor> results(2);
    OnThreads(2, [&](int r) {
      auto everyone = world.Group(r, "world");
      ShardedAdamW optimizer(Transformer(c, 11), *everyone, adam, at::Device(at::kCPU), bucket);
      if (bucket != kDefaultBucketElements) {
        EXPECT_GT(optimizer.shard_layout().buckets.size(), 20u);
      }
      Transformer model(c, 11);
      for (const Documents& docs : batches) {
        std::int64_t targets = 0;
        for (const auto& d : docs) targets += static_cast<std::int64_t>(d.size()) - 1;
        // Rank 0 runs the first half of the documents, rank 1 the rest.
        const std::size_t half = docs.size() / 2;
        const Documents mine(
            docs.begin() + (r == 0 ? 0 : static_cast<std::ptrdiff_t>(half)),
            r == 0 ? docs.begin() + static_cast<std::ptrdiff_t>(half) : docs.end());
        optimizer.Materialise(model);
        ZeroGradients(model);
        ForwardBackward(model, {PackDocuments(mine, c.shape.vocab)}, targets);
        optimizer.Step(&model);
      }
      results[r] = optimizer.full_parameters().clone();
    });
    EXPECT_TRUE(at::equal(results[0], results[1]));
    const FlatLayout layout = MakeFlatLayout(c);
    double worst = 0.0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const NamedParameter& p = reference.named_parameters()[i];
      worst = std::max(worst, RelativeError(RegionOf(results[0], layout, p, 1, 0), expected[i]));
    }
    EXPECT_LT(worst, 1e-5);
  }
}

// A NaN gradient on one rank: every rank sees the same non-finite norm and skips the
// update, leaving master weights, moments and the step count as they were; a finite step
// then applies and reports the norm both ranks agree on.
TEST(FakeCommTest, NonFiniteGradientSkipsTheUpdateOnEveryRank) {
  const ModelConfig c = Tiny();
  const Documents docs = RandomDocuments(kLengths, 4, static_cast<int>(c.shape.vocab));
  std::int64_t targets = 0;
  for (const auto& d : docs) targets += static_cast<std::int64_t>(d.size()) - 1;
  FakeCommWorld world(2);
  std::vector<ShardedAdamW::StepOutcome> poisoned(2), clean(2);
  std::vector<bool> unchanged(2, false);
  OnThreads(2, [&](int r) {
    auto everyone = world.Group(r, "world");
    ShardedAdamW optimizer(Transformer(c, 11), *everyone, AdamWOptions{});
    Transformer model(c, 11);
    const at::Tensor before = optimizer.full_parameters().clone();
    optimizer.Materialise(model);
    ZeroGradients(model);
    ForwardBackward(model, {PackDocuments(docs, c.shape.vocab)}, targets);
    if (r == 1) {
      at::NoGradGuard no_grad;
      GradientOf(model.named_parameters().front()).view({-1})[0] = std::nan("");
    }
    poisoned[static_cast<std::size_t>(r)] = optimizer.Step(&model);
    unchanged[static_cast<std::size_t>(r)] =
        at::equal(before, optimizer.full_parameters()) && optimizer.steps() == 0;
    optimizer.Materialise(model);
    ZeroGradients(model);
    ForwardBackward(model, {PackDocuments(docs, c.shape.vocab)}, targets);
    clean[static_cast<std::size_t>(r)] = optimizer.Step(&model);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(poisoned[static_cast<std::size_t>(r)].applied) << "rank " << r;
    EXPECT_FALSE(std::isfinite(poisoned[static_cast<std::size_t>(r)].grad_norm));
    EXPECT_TRUE(unchanged[static_cast<std::size_t>(r)]) << "rank " << r;
    EXPECT_TRUE(clean[static_cast<std::size_t>(r)].applied);
    EXPECT_GT(clean[static_cast<std::size_t>(r)].grad_norm, 0.0);
  }
  EXPECT_EQ(clean[0].grad_norm, clean[1].grad_norm);
}

// The overlapped reduction (gradients collected by hooks during backward, shards reduced as
// they become final) and the overlapped parameter gather (copied as the next forward reaches
// them) give the plain path's three steps, and on 2 ranks the last layers' shard starts while
// backward is still producing the first layers' gradients.
TEST(FakeCommTest, OverlappedReductionEqualsThePlainOne) {
  const ModelConfig c = Tiny();
  AdamWOptions adam;
  adam.lr = 1e-3;
  const Documents docs = RandomDocuments(kLengths, 9, static_cast<int>(c.shape.vocab));
  std::int64_t targets = 0;
  for (const auto& d : docs) targets += static_cast<std::int64_t>(d.size()) - 1;
  FakeCommWorld world(2);
  std::vector<at::Tensor> plain(2), overlapped(2);
  std::vector<ShardedAdamW::OverlapStats> stats(2);
  OnThreads(2, [&](int r) {
    auto everyone = world.Group(r, "world");
    const std::size_t half = docs.size() / 2;
    const Documents mine(docs.begin() + (r == 0 ? 0 : static_cast<std::ptrdiff_t>(half)),
                         r == 0 ? docs.begin() + static_cast<std::ptrdiff_t>(half) : docs.end());
    const std::vector<PackedBatch> mbs = {
        PackDocuments(Documents(mine.begin(), mine.begin() + 2), c.shape.vocab),
        PackDocuments(Documents(mine.begin() + 2, mine.end()), c.shape.vocab)};
    for (bool overlap : {false, true}) {
      // Four buckets, so that reduce-scatters can start while backward goes on.
      ShardedAdamW optimizer(Transformer(c, 11), *everyone, adam, at::Device(at::kCPU),
                             MakeFlatLayout(c).numel / 4 + 2);
      Transformer model(c, 11);
      Transformer check(c, 12);
      for (int step = 0; step < 3; ++step) {
        if (!overlap) {
          optimizer.Materialise(model);
          ZeroGradients(model);
          ForwardBackward(model, mbs, targets);
          optimizer.Step(&model);
          continue;
        }
        // Overlapped both ways: parameters copied as forward reaches them (the last
        // step's all-gathers still in flight), gradients reduced during backward.
        optimizer.BeginMaterialise(model);
        const at::Tensor head_before = model.named_parameters().back().value.clone();
        ZeroGradients(model);
        optimizer.BeginStep(&model, static_cast<int>(mbs.size()));
        ForwardBackward(model, mbs, targets);
        optimizer.FinishMaterialise(model);
        optimizer.Materialise(check);
        for (std::size_t i = 0; i < model.named_parameters().size(); ++i) {
          EXPECT_TRUE(at::equal(model.named_parameters()[i].value.detach(),
                                check.named_parameters()[i].value.detach()))
              << "step " << step << " parameter " << i;
        }
        // Nothing was copied before forward asked: after a step the head still held the
        // previous values when BeginMaterialise returned.
        EXPECT_EQ(at::equal(head_before, model.named_parameters().back().value.detach()), step == 0)
            << "step " << step;
        optimizer.Step(&model);
        stats[static_cast<std::size_t>(r)] = optimizer.overlap_stats();
      }
      (overlap ? overlapped : plain)[static_cast<std::size_t>(r)] =
          optimizer.full_parameters().clone();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(RelativeError(overlapped[r], plain[r]), 1e-6);
    EXPECT_EQ(stats[r].buckets, 4);
    EXPECT_EQ(stats[r].buckets_started_in_backward, 3) << "rank " << r;
  }
  EXPECT_TRUE(at::equal(overlapped[0], overlapped[1]));
}

// A step of the mixed-precision tests: random documents of kLengths drawn with `seed`, as
// two micro-batches of four, and the step's target count.
std::pair<std::vector<PackedBatch>, std::int64_t> TwoMicroBatchStep(const ModelConfig& c,
                                                                    int seed) {
  const Documents docs = RandomDocuments(kLengths, seed, static_cast<int>(c.shape.vocab));
  std::int64_t targets = 0;
  for (const auto& d : docs) targets += static_cast<std::int64_t>(d.size()) - 1;
  return {{PackDocuments({docs[0], docs[1], docs[2], docs[3]}, c.shape.vocab),
           PackDocuments({docs[4], docs[5], docs[6], docs[7]}, c.shape.vocab)},
          targets};
}

// Two single-rank optimizers from the same initial weights (AdamW, lr 3e-3) and bf16
// compute options: the mixed-precision tests train each a different way and compare.
struct TwoOptimizers {
  ModelConfig c = Tiny();
  ComputeOptions bf16 = [] {
    ComputeOptions o;
    o.precision = Precision::kBf16;
    return o;
  }();
  AdamWOptions adam = [] {
    AdamWOptions o;
    o.lr = 3e-3;
    return o;
  }();
  FakeCommWorld world{1};
  std::unique_ptr<CommGroup> everyone = world.Group(0, "world");
  ShardedAdamW first{Transformer(c, 11), *everyone, adam};
  ShardedAdamW second{Transformer(c, 11), *everyone, adam};
};

// bf16 compute with fp32 main gradients and fp32 optimizer state tracks fp32 training: the
// per-step losses agree to bf16 accuracy (8 mantissa bits: relative 2^-8 per rounding,
// accumulated through 2 layers), and the micro-batch gradients are accumulated in fp32.
TEST(MixedPrecisionTest, Bf16TrainingTracksFp32OnTheCpu) {
  TwoOptimizers t;
  const ModelConfig& c = t.c;
  ShardedAdamW& fp32_opt = t.first;
  ShardedAdamW& bf16_opt = t.second;
  Transformer fp32_model(c, 11);
  Transformer bf16_model(c, 11, nullptr, {}, t.bf16);
  ASSERT_EQ(bf16_model.parameters()[0].scalar_type(), at::kBFloat16);
  ASSERT_TRUE(bf16_model.named_parameters()[0].main_grad.defined());
  double worst = 0.0;
  for (int s = 0; s < 10; ++s) {
    const auto [mbs, targets] = TwoMicroBatchStep(c, 40 + s);
    double losses[2];
    int i = 0;
    for (auto [model, opt] :
         {std::pair{&fp32_model, &fp32_opt}, std::pair{&bf16_model, &bf16_opt}}) {
      opt->Materialise(*model);
      ZeroGradients(*model);
      losses[i++] = ForwardBackward(*model, mbs, targets) / static_cast<double>(targets);
      opt->Step(model);
    }
    if (s == 0) {
      // The fp32 main gradient holds the sum over both micro-batches; the bf16 one is zero.
      const NamedParameter& p = bf16_model.named_parameters()[1];
      EXPECT_EQ(p.main_grad.scalar_type(), at::kFloat);
      EXPECT_EQ(p.value.grad().abs().max().item<double>(), 0.0);
    }
    worst = std::max(worst, std::abs(losses[1] - losses[0]) / losses[0]);
  }
  EXPECT_LT(worst, 2e-2);
  // The master weights moved together: fp32 training and bf16 training differ by far less
  // than the distance either moved from the initial weights.
  const at::Tensor initial =
      ShardedAdamW(Transformer(c, 11), *t.everyone, t.adam).full_parameters();
  const double moved = (fp32_opt.full_parameters() - initial).norm().item<double>();
  const double apart =
      (bf16_opt.full_parameters() - fp32_opt.full_parameters()).norm().item<double>();
  EXPECT_LT(apart, 0.1 * moved);
}

// On the training path (BeginStep) the optimizer's hooks take each backward pass's gradient
// out of the parameters as autograd accumulates it: after every backward pass no parameter
// holds a .grad and a bf16 model's fp32 main_grad is never allocated, and three steps end
// bit for bit where steps that collect the fp32 main gradients after backward end.
TEST(MixedPrecisionTest, TrainingPathKeepsNoGradientOfItsOwn) {
  TwoOptimizers t;
  const ModelConfig& c = t.c;
  ShardedAdamW& hooked_opt = t.first;
  ShardedAdamW& plain_opt = t.second;
  Transformer hooked(c, 11, nullptr, {}, t.bf16);
  Transformer plain(c, 11, nullptr, {}, t.bf16);
  for (int s = 0; s < 3; ++s) {
    const auto [mbs, targets] = TwoMicroBatchStep(c, 60 + s);
    hooked_opt.Materialise(hooked);
    hooked_opt.BeginStep(&hooked, 2);
    for (const PackedBatch& mb : mbs) {
      ForwardBackward(hooked, {mb}, targets);
      for (const NamedParameter& p : hooked.named_parameters()) {
        EXPECT_FALSE(p.value.grad().defined()) << p.name << " step " << s;
        EXPECT_EQ(p.main_grad.numel(), 0) << p.name;
      }
    }
    hooked_opt.Step(&hooked);
    plain_opt.Materialise(plain);
    ZeroGradients(plain);
    ForwardBackward(plain, mbs, targets);
    plain_opt.Step(&plain);
    EXPECT_GT(plain.named_parameters()[1].main_grad.numel(), 0);  // that path keeps it
  }
  EXPECT_TRUE(at::equal(hooked_opt.full_parameters(), plain_opt.full_parameters()));
}

}  // namespace
}  // namespace hydraulis
