// Support for tests that hold distributed training to one process (header-only): the
// global batches every test trains on (kSteps steps, micro-batches of different shapes), the
// single-process reference, the comparison of each rank's run with it, and the step plans
// that deal those batches to the pipelines of a candidate strategy (cp layouts included).
// The ranks are the test binary itself: DpWorkerMain and TrainerWorkerMain, defined beside
// the tests that start them, are its `--dp-worker` and `--trainer-worker` modes.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/time_model.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/runtime/step/lr_schedule.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/recompute.h"
#include "hydraulis/spec/strategy.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/reference_trainer.h"
#include "runtime/testing/test_documents.h"

namespace hydraulis::test_support {

// One rank of a test, started by RunRanks: `--dp-worker SCENARIO OUTFILE` trains with the
// ReferenceTrainer over a dp or tp group, `--trainer-worker SCENARIO OUTFILE` with the
// DistributedTrainer. Each writes its Outcome to OUTFILE and returns the exit status.
int DpWorkerMain(const std::string& scenario, const std::string& path);
int TrainerWorkerMain(const std::string& scenario, const std::string& path);

using Split = std::vector<std::vector<int>>;  // micro-batches as lists of document indices

inline constexpr int kSteps = 3;
inline const std::vector<int> kGlobalBatchLengths = {9, 1, 30, 4, 17, 2, 11};
// The global batch of each step split into micro-batches of different shapes; the 1-token
// document 1 alone makes a micro-batch without a target (step 0).
inline const std::vector<Split> kStepSplits = {
    {{0}, {1}, {2, 3}, {4, 5, 6}}, {{6, 2}, {5, 0, 4}, {3, 1}}, {{0, 1, 2, 3, 4, 5, 6}}};

inline ModelConfig Tiny() {
  return LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
}

// Which rank runs micro-batch `mb` of a step: "round-robin" deals them out (rank 1 gets
// none in step 2, which has one micro-batch); "rank0-only" leaves rank 1 idle every step.
inline int Owner(const std::string& assignment, std::size_t mb, int world_size) {
  if (assignment == "rank0-only") return 0;
  return static_cast<int>(mb % static_cast<std::size_t>(world_size));
}

// The micro-batches of `step` that `rank` runs (all of them when rank < 0).
inline std::vector<PackedBatch> MicroBatches(const ModelConfig& c, int step,
                                             const std::string& assignment, int rank,
                                             int world_size) {
  const Documents docs = RandomDocuments(
      kGlobalBatchLengths, 100 + static_cast<std::uint64_t>(step), static_cast<int>(c.shape.vocab));
  const Split& split = kStepSplits[static_cast<std::size_t>(step)];
  std::vector<PackedBatch> out;
  for (std::size_t mb = 0; mb < split.size(); ++mb) {
    if (rank >= 0 && Owner(assignment, mb, world_size) != rank) continue;
    Documents d;
    for (int i : split[mb]) d.push_back(docs[static_cast<std::size_t>(i)]);
    out.push_back(PackDocuments(d, c.shape.vocab));
  }
  return out;
}

inline AdamWOptions Adam(double eps, bool clip = false) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.eps = eps;
  // Far below the tiny model's gradient norms (about 2 to 4): every step is clipped.
  if (clip) o.clip_grad = 0.05;
  return o;
}

// With clipping, the tests also run a schedule: one warmup step, then cosine decay.
inline double ScheduledLr(int step) {
  LrSchedule schedule;
  schedule.warmup_steps = 1;
  schedule.decay_style = LrDecayStyle::kCosine;
  schedule.min_lr = 1e-4;
  return LearningRate(schedule, AdamWOptions{}.lr, kSteps, step);
}

inline std::vector<float> Flatten(const Transformer& model) {
  std::vector<float> out;
  for (const at::Tensor& p : model.parameters()) Append(p, out);
  return out;
}

// The mean next-token loss of step 0's global batch on `model`, with its target count.
inline std::pair<double, std::int64_t> EvalLoss(const Transformer& model) {
  at::NoGradGuard no_grad;
  const Documents docs =
      RandomDocuments(kGlobalBatchLengths, 100, static_cast<int>(model.config().shape.vocab));
  const PackedBatch batch = PackDocuments(docs, model.config().shape.vocab);
  const TokenLoss loss = SummedTokenLoss(model.Forward(batch), batch);
  return {loss.sum.item<double>() / static_cast<double>(loss.tokens), loss.tokens};
}

// One process training on the whole global batches (`clip`: clipped, on ScheduledLr). With
// `eval`, the losses are followed by step 0's batch's loss after each step (EvalLoss).
inline Outcome Reference(double eps, bool clip = false, bool eval = false) {
  const ModelConfig c = Tiny();
  Transformer model(c, 11);
  ReferenceTrainer trainer(model, Adam(eps, clip));
  Outcome o;
  std::vector<std::pair<double, std::int64_t>> evals;
  for (int step = 0; step < kSteps; ++step) {
    if (clip) trainer.SetLearningRate(ScheduledLr(step));
    ReferenceStepResult r = trainer.Step(MicroBatches(c, step, "", -1, 1));
    o.losses.push_back(r.loss);
    o.targets.push_back(r.targets);
    if (eval) evals.push_back(EvalLoss(model));
  }
  for (const auto& [loss, targets] : evals) {
    o.losses.push_back(loss);
    o.targets.push_back(targets);
  }
  o.parameters = Flatten(model);
  return o;
}

// max |a - b| / max |b| per parameter tensor, the largest over the tensors.
inline double MaxParameterError(const std::vector<float>& a, const std::vector<float>& b) {
  Transformer shapes(Tiny(), 11);
  double worst = 0.0;
  std::size_t offset = 0;
  for (const at::Tensor& p : shapes.parameters()) {
    const auto n = static_cast<std::size_t>(p.numel());
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = offset; i < offset + n; ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    }
    worst = std::max(worst, diff / (scale > 0.0 ? scale : 1.0));
    offset += n;
  }
  return worst;
}

inline std::string EpsText(double eps) {
  std::ostringstream text;
  text.precision(17);
  text << eps;
  return text.str();
}

// Expects one rank's run to match the single-process reference: a clean exit, losses
// within 1e-5 relative, the same global target counts, parameters within `tolerance`
// (max-relative per tensor). Returns the parameter error, or -1 when a fatal check failed.
inline double ExpectRankMatchesReference(const RankRun& run, const Outcome& reference,
                                         double tolerance) {
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.outcome.error, "");
  EXPECT_EQ(run.outcome.losses.size(), reference.losses.size());
  EXPECT_EQ(run.outcome.parameters.size(), reference.parameters.size());
  if (run.status != 0 || run.outcome.losses.size() != reference.losses.size() ||
      run.outcome.parameters.size() != reference.parameters.size()) {
    return -1;
  }
  for (std::size_t s = 0; s < reference.losses.size(); ++s) {
    EXPECT_NEAR(run.outcome.losses[s], reference.losses[s], 1e-5 * reference.losses[s])
        << "step " << s;
    EXPECT_EQ(run.outcome.targets[s], reference.targets[s]) << "step " << s;
  }
  const double error = MaxParameterError(run.outcome.parameters, reference.parameters);
  EXPECT_LE(error, tolerance);
  return error;
}

// Candidate sets as text: candidates separated by '|', pipelines by ',', each "tXpY"
// (tp X, pp Y) or "tXpYcZ" (and cp Z), e.g. "t2p1,t1p1,t1p1|t1p2,t1p1,t1p1|t1p1c2,t1p1".
inline std::vector<Strategy> ParseCandidates(const std::string& text) {
  std::vector<Strategy> out;
  std::stringstream candidates(text);
  std::string candidate;
  while (std::getline(candidates, candidate, '|')) {
    Strategy s;
    s.name = candidate;
    std::stringstream pipelines(candidate);
    std::string pipeline;
    while (std::getline(pipelines, pipeline, ',')) {
      Scheme scheme;
      const std::size_t p = pipeline.find('p');
      const std::size_t c = pipeline.find('c');
      scheme.tp = std::stoi(pipeline.substr(1, p - 1));
      scheme.pp = std::stoi(pipeline.substr(p + 1, c == std::string::npos ? c : c - p - 1));
      if (c != std::string::npos) scheme.cp = std::stoi(pipeline.substr(c + 1));
      s.pipelines.push_back(scheme);
    }
    out.push_back(s);
  }
  return out;
}

// Where document `document` of step `step` lies on a cp pipeline's ranks, chosen by hand to
// reach every case: (document + step + 1) mod (cp + 1), the value cp meaning sharded. With
// kStepSplits and cp = 2 a 1-token document is sharded alone (step 0: rank 1 holds nothing
// yet joins the gather), documents are placed so that a rank holds no token of a
// micro-batch at all (step 0's {0}), the 2-token document 5 is sharded (step 2: shorter
// than 2 * cp, empty chunks) beside the 30-token one, and odd lengths are sharded (9, 11,
// 17); cp = 3 adds a rank without a token of a sharded 2-token document.
inline int HandPlaced(int document, int step, int cp) {
  const int where = (document + step + 1) % (cp + 1);
  return where == cp ? kSharded : where;
}

// Where document `document` of step `step` lies with subsets (flag "subsets"): for cp >= 3 a
// cycle through rank sets of every width, non-contiguous ones included, so that step 2's
// single micro-batch of all seven documents holds on cp = 4 widths 1, 1, 2, 1, 4, 2 and 3
// at once (the 1- and 2-token documents over 2 ranks: empty chunks); cp = 2 as HandPlaced.
inline std::vector<int> SubsetPlaced(int document, int step, int cp) {
  static const std::vector<std::vector<int>> kCp4 = {
      {0, 1, 2, 3}, {1, 3}, {0, 2, 3}, {1}, {0, 1}, {1, 2, 3}, {3}, {2}, {0, 2}, {0}};
  static const std::vector<std::vector<int>> kCp3 = {{0, 1, 2}, {0, 2}, {1},   {1, 2},
                                                     {0},       {2},    {0, 1}};
  if (cp < 3 || cp > 4) return {HandPlaced(document, step, cp)};
  const std::vector<std::vector<int>>& sets = cp == 4 ? kCp4 : kCp3;
  return sets[static_cast<std::size_t>(document + 3 * step) % sets.size()];
}

// The planner's layout rule (LayOutMicroBatch) on a cost that makes sharding worthwhile for
// documents of more than about 10 tokens (a made-up cost: quadratic attention, a cheap
// exchange, memory for any micro-batch of the test).
inline CpLayout RuleLayout(const std::vector<std::int64_t>& lengths, int cp) {
  const std::int64_t capacity = 4000;  // a rank holds 1000 tokens: any micro-batch here
  const ShardCost cost = MakeShardCost(cp, TimeModel{0.01, 0.1, 1.0}, capacity, 0.02, 0.0);
  return LayOutMicroBatch(lengths, cost);
}

// The step plan: the step's micro-batches (kStepSplits) dealt round-robin to the
// pipelines of candidate `strategy`, so with two pipelines the second gets none in step 2;
// each cp > 1 pipeline's micro-batches laid out by HandPlaced, or by RuleLayout with
// `rule_layouts`.
inline Plan PlanFor(int step, int strategy, const std::vector<Strategy>& candidates,
                    const std::string& layouts = "") {
  const Strategy& s = candidates[static_cast<std::size_t>(strategy)];
  const std::size_t pipelines = s.pipelines.size();
  std::vector<Split> dealt(pipelines);
  const Split& split = kStepSplits[static_cast<std::size_t>(step)];
  for (std::size_t mb = 0; mb < split.size(); ++mb) dealt[mb % pipelines].push_back(split[mb]);
  Plan plan = PlanOf(strategy, std::move(dealt));
  for (std::size_t p = 0; p < pipelines; ++p) {
    const int cp = s.pipelines[p].cp;
    if (cp == 1) continue;
    for (const std::vector<int>& mb : plan.pipelines[p].micro_batches) {
      std::vector<std::vector<int>> places;
      std::vector<std::int64_t> lengths;
      for (int d : mb) {
        places.push_back(layouts == "subsets" ? SubsetPlaced(d, step, cp)
                                              : std::vector<int>{HandPlaced(d, step, cp)});
        lengths.push_back(kGlobalBatchLengths[static_cast<std::size_t>(d)]);
      }
      plan.pipelines[p].cp_layouts.push_back(layouts == "rule" ? RuleLayout(lengths, cp)
                                                               : CpLayoutFromPlaces(places, cp));
    }
  }
  return plan;
}

inline int WorldSize(const std::vector<Strategy>& candidates) {
  int world = 0;
  for (const Strategy& s : candidates) world = std::max(world, s.Gpus());
  return world;
}

// Runs the distributed trainer and expects every rank to match one process training on the
// same global batches (Adam eps 1e-4, parameters within 1e-5), and all ranks to hold the
// same parameters. `flag`: TrainerWorker's. Returns the worst parameter error.
inline double ExpectTrainerMatchesOneProcess(const std::string& candidates,
                                             const std::string& schedule,
                                             const std::string& flag = "",
                                             Recompute recompute = Recompute::kNone) {
  const double eps = 1e-4;
  const Outcome reference = Reference(eps, flag == "clip", flag == "eval");
  const int world = WorldSize(ParseCandidates(candidates));
  std::string scenario = candidates + "/" + schedule + "/" + EpsText(eps);
  if (!flag.empty() || recompute != Recompute::kNone) scenario += "/" + flag;
  // Appended: g++ 12 warns falsely on `"/" + ToString(...)` where this is inlined (GCC PR105651).
  if (recompute != Recompute::kNone) scenario.append("/").append(ToString(recompute));
  std::vector<RankRun> runs =
      RunRanks(world, "--trainer-worker", scenario, std::chrono::seconds(90));
  double worst = 0.0;
  for (int rank = 0; rank < world; ++rank) {
    const RankRun& run = runs[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    const double error = ExpectRankMatchesReference(run, reference, 1e-5);
    if (error < 0) continue;
    worst = std::max(worst, error);
    EXPECT_TRUE(run.outcome.parameters == runs[0].outcome.parameters);
  }
  std::cout << "[ " << candidates << " schedule " << schedule << " ] max parameter error " << worst
            << "\n";
  return worst;
}

}  // namespace hydraulis::test_support
