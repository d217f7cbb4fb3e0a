// The DistributedTrainer against one process on homogeneous, heterogeneous and switching
// strategies, with evaluation and recomputation, and its pipeline schedule and stages.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/runtime/step/pipeline_stage.h"
#include "hydraulis/spec/recompute.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/test_documents.h"
#include "runtime/testing/training_equivalence.h"

namespace hydraulis {
namespace {

using test_support::Adam;
using test_support::Append;
using test_support::Documents;
using test_support::ExpectTrainerMatchesOneProcess;
using test_support::kGlobalBatchLengths;
using test_support::kSteps;
using test_support::Outcome;
using test_support::ParseCandidates;
using test_support::PlanFor;
using test_support::RandomDocuments;
using test_support::RankRun;
using test_support::RunRanks;
using test_support::ScheduledLr;
using test_support::Tiny;

// Scenario "CANDIDATES/SCHEDULE/EPS[/FLAG]": SCHEDULE lists the candidate of each step
// ("0,1,2"); FLAG "corrupt": rank 1 runs step 1 with a different plan; "corrupt-layout": rank
// 1 runs step 1 with another cp layout (same micro-batches); "no-layouts": the cp pipelines'
// plans lack cp_layouts; "rule": cp layouts by RuleLayout instead of HandPlaced; "subsets":
// by SubsetPlaced; "clip": gradients clipped (Adam) and the learning rate on ScheduledLr.
void TrainerWorker(const std::string& scenario, Outcome& o) {
  std::vector<std::string> parts;
  std::stringstream text(scenario);
  for (std::string part; std::getline(text, part, '/');) parts.push_back(part);
  const std::vector<Strategy> candidates = ParseCandidates(parts.at(0));
  std::vector<int> schedule;
  std::stringstream steps(parts.at(1));
  for (std::string k; std::getline(steps, k, ',');) schedule.push_back(std::stoi(k));
  const std::string flag = parts.size() > 3 ? parts[3] : "";
  const bool corrupt = flag == "corrupt";

  DistributedOptions options = DistributedOptionsFromEnvironment();  // the test edge
  options.timeout = std::chrono::milliseconds(20000);
  Rendezvous rendezvous(options);
  const ModelConfig c = Tiny();
  const bool clip = flag == "clip";
  ComputeOptions compute;
  if (parts.size() > 4) compute.recompute = ParseRecompute(parts[4], "recompute");
  DistributedTrainer trainer(c, 11, Adam(std::stod(parts.at(2)), clip), rendezvous, candidates,
                             compute);
  std::vector<std::pair<double, std::int64_t>> evals;
  for (int step = 0; step < kSteps; ++step) {
    if (clip) trainer.optimizer().set_lr(ScheduledLr(step));
    const Documents docs =
        RandomDocuments(kGlobalBatchLengths, 100 + static_cast<std::uint64_t>(step),
                        static_cast<int>(c.shape.vocab));
    Plan plan = PlanFor(step, schedule.at(static_cast<std::size_t>(step)), candidates,
                        flag == "rule" || flag == "subsets" ? flag : "");
    if (corrupt && step == 1 && options.rank == 1)
      std::swap(plan.pipelines[0].micro_batches[0][0], plan.pipelines[0].micro_batches[1][0]);
    if (flag == "corrupt-layout" && step == 1 && options.rank == 1) {
      CpLayout& layout = plan.pipelines[0].cp_layouts.at(0);
      std::vector<std::vector<int>> places;
      for (std::size_t d = 0; d < layout.size(); ++d) {
        const std::span<const int> ranks = layout.Ranks(d);
        places.emplace_back(ranks.begin(), ranks.end());
      }
      places.at(0) = places[0].size() == 1 ? std::vector<int>{kSharded} : std::vector<int>{0};
      layout = CpLayoutFromPlaces(places, plan.pipelines[0].scheme.cp);
    }
    if (flag == "no-layouts") {
      for (PipelinePlan& pipeline : plan.pipelines) pipeline.cp_layouts.clear();
    }
    const DistributedStepResult r = trainer.Step(plan, docs);
    std::int64_t tokens = 0;
    for (const auto& d : docs) tokens += static_cast<std::int64_t>(d.size());
    if (r.tokens_run != tokens) {
      throw Error("step " + std::to_string(step) + ": pipelines ran " +
                  std::to_string(r.tokens_run) + " tokens of a batch of " + std::to_string(tokens));
    }
    o.losses.push_back(r.loss);
    o.targets.push_back(r.targets);
    if (flag == "eval") {
      // Step 0's batch again, forward only, on the strategy of step 0.
      const Documents first =
          RandomDocuments(kGlobalBatchLengths, 100, static_cast<int>(c.shape.vocab));
      const DistributedTrainer::EvalResult e =
          trainer.Evaluate(PlanFor(0, 0, candidates, ""), first);
      evals.emplace_back(e.loss, e.targets);
    }
  }
  for (const auto& [loss, targets] : evals) {
    o.losses.push_back(loss);
    o.targets.push_back(targets);
  }
  Append(trainer.optimizer().full_parameters(), o.parameters);
  trainer.world().Barrier();
}

}  // namespace

int test_support::TrainerWorkerMain(const std::string& scenario, const std::string& path) {
  at::set_num_threads(1);
  Outcome o;
  try {
    TrainerWorker(scenario, o);
  } catch (const std::exception& e) {
    o.error = e.what();
    for (char& ch : o.error) {
      if (ch == '\n') ch = ' ';
    }
  }
  Write(o, path);
  return 0;
}

namespace {

// One candidate of dp identical (tp, pp) pipelines on tp * pp * dp <= 4 ranks. In step 2
// there is one micro-batch: with dp = 2 the second pipeline runs none and still joins the
// gradient reduction, and with pp = 2 a pipeline runs fewer micro-batches than stages.
class HomogeneousTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(HomogeneousTest, TrainsLikeOneProcess) {
  const auto [tp, pp, dp] = GetParam();
  std::string candidate;
  for (int p = 0; p < dp; ++p) {
    candidate.append(p > 0 ? ",t" : "t")
        .append(std::to_string(tp))
        .append("p")
        .append(std::to_string(pp));
  }
  ExpectTrainerMatchesOneProcess(candidate, "0,0,0");
}

INSTANTIATE_TEST_SUITE_P(Layouts, HomogeneousTest,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(2, 1, 1),
                                           std::make_tuple(1, 2, 1), std::make_tuple(1, 1, 2),
                                           std::make_tuple(2, 2, 1), std::make_tuple(2, 1, 2),
                                           std::make_tuple(1, 2, 2)),
                         [](const auto& layout) {
                           return "tp" + std::to_string(std::get<0>(layout.param)) + "pp" +
                                  std::to_string(std::get<1>(layout.param)) + "dp" +
                                  std::to_string(std::get<2>(layout.param));
                         });

// Pipelines of different schemes side by side, on 4 ranks.
TEST(HeterogeneousTest, MixedPipelinesTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t2p1,t1p1,t1p1", "0,0,0");
  ExpectTrainerMatchesOneProcess("t1p2,t1p1,t1p1", "0,0,0");
}

// A different strategy every step; the optimizer state never moves.
TEST(HeterogeneousTest, SwitchingStrategiesEveryStepTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t2p1,t1p1,t1p1|t1p2,t1p1,t1p1|t2p2", "0,1,2");
  ExpectTrainerMatchesOneProcess("t2p1,t1p1|t1p1,t1p1,t1p1", "1,0,1");
}

// Evaluation between steps (DistributedTrainer::Evaluate, forward only) on every layout:
// step 0's batch after each step has one process's loss on the same parameters (1e-5), and
// the training it interleaves with is untouched (the parameters after three steps).
TEST(EvaluationTrainerTest, ForwardOnlyLossEqualsOneProcessOnEveryLayout) {
  for (const char* candidates :
       {"t1p1", "t1p1,t1p1", "t2p2", "t1p2,t1p1,t1p1", "t2p1c2", "t1p2c2", "t1p1c3,t1p1"}) {
    SCOPED_TRACE(candidates);
    ExpectTrainerMatchesOneProcess(candidates, "0,0,0", "eval");
  }
}

// Activation recomputation on every layout, against one process that keeps every
// activation: the same parameters (1e-5) after three steps. Full recomputation runs each
// layer's forward again in the backward, its tp all-reduces and cp exchanges included;
// selective runs the attention core (cp exchange included) and the SwiGLU again.
class RecomputationTest : public ::testing::TestWithParam<Recompute> {};

TEST_P(RecomputationTest, EveryLayoutTrainsLikeOneProcess) {
  const Recompute mode = GetParam();
  ExpectTrainerMatchesOneProcess("t1p1", "0,0,0", "", mode);
  ExpectTrainerMatchesOneProcess("t2p2", "0,0,0", "", mode);
  ExpectTrainerMatchesOneProcess("t2p1c2", "0,0,0", "", mode);
  ExpectTrainerMatchesOneProcess("t1p2c2", "0,0,0", "", mode);
  ExpectTrainerMatchesOneProcess("t1p1c3,t1p1|t2p1,t1p1,t1p1", "0,1,0", "subsets", mode);
}

INSTANTIATE_TEST_SUITE_P(Modes, RecomputationTest,
                         ::testing::Values(Recompute::kSelective, Recompute::kFull),
                         [](const auto& mode) { return ToString(mode.param); });

TEST(DistributedTrainerTest, RanksWithDifferentPlansFailWithAClearError) {
  std::vector<RankRun> runs =
      RunRanks(2, "--trainer-worker", "t1p1,t1p1/0,0,0/0.0001/corrupt", std::chrono::seconds(60));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 0);
    EXPECT_NE(run.outcome.error.find("the ranks hold different step plans"), std::string::npos)
        << run.outcome.error;
  }
}

TEST(DistributedTrainerTest, OneFOneBOrder) {
  auto text = [](int stage, int pp, int v) {
    std::string out;
    for (const StageOp& op : OneFOneBOrder(stage, pp, v)) {
      out.append(op.forward ? "F" : "B").append(std::to_string(op.micro_batch)).append(" ");
    }
    return out;
  };
  EXPECT_EQ(text(0, 2, 3), "F0 F1 B0 F2 B1 B2 ");
  EXPECT_EQ(text(1, 2, 3), "F0 B0 F1 B1 F2 B2 ");
  EXPECT_EQ(text(0, 4, 2), "F0 F1 B0 B1 ");  // fewer micro-batches than warm-up slots
  EXPECT_EQ(text(0, 3, 0), "");
  EXPECT_THROW(OneFOneBOrder(2, 2, 1), InvalidInput);
}

TEST(DistributedTrainerTest, StagesSplitTheLayers) {
  ModelConfig c = Tiny();
  c.shape.layers = 5;
  std::string text;
  for (int s = 0; s < 3; ++s) {
    const ModelPart p = ModelPart::Stage(c, s, 3);
    text += std::to_string(p.first_layer) + "-" + std::to_string(p.end_layer) +
            (p.has_embedding ? "e" : "") + (p.has_head ? "h" : "") + " ";
  }
  EXPECT_EQ(text, "0-2e 2-4 4-5h ");
  EXPECT_THROW(ModelPart::Stage(c, 0, 6), InvalidInput);
}

}  // namespace
}  // namespace hydraulis
