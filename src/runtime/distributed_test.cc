// Data- and tensor-parallel training over real Gloo ranks. The test binary launches itself: with
// `--dp-worker SCENARIO OUTFILE` it is one rank (rendezvous from RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, as under torchrun), otherwise it runs the tests, which start
// the ranks, wait for them with a deadline (a hang fails the test instead of blocking
// ctest) and compare what they wrote with one process training on the same global batches.
// Processes are spawned fresh rather than forked: forking a process that has started
// libtorch's and OpenMP's threads is not safe.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/time_model.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/checkpoint.h"
#include "hydraulis/runtime/job/plan_ahead.h"
#include "hydraulis/runtime/job/training_job.h"
#include "hydraulis/runtime/job/training_run.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/runtime/step/lr_schedule.h"
#include "hydraulis/runtime/step/pipeline_stage.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/spec_io.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/reference_trainer.h"
#include "runtime/testing/test_documents.h"

extern char** environ;

namespace hydraulis {
namespace {

using test_support::Append;
using test_support::Documents;
using test_support::Outcome;
using test_support::RandomDocuments;
using test_support::RankRun;
using test_support::Read;
using test_support::RunRanks;
using test_support::Write;
using Split = std::vector<std::vector<int>>;  // micro-batches as lists of document indices

constexpr int kSteps = 3;
const std::vector<int> kGlobalBatchLengths = {9, 1, 30, 4, 17, 2, 11};
// The global batch of each step split into micro-batches of different shapes; the 1-token
// document 1 alone makes a micro-batch without a target (step 0).
const std::vector<Split> kStepSplits = {
    {{0}, {1}, {2, 3}, {4, 5, 6}}, {{6, 2}, {5, 0, 4}, {3, 1}}, {{0, 1, 2, 3, 4, 5, 6}}};

ModelConfig Tiny() {
  return LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
}

// Which rank runs micro-batch `mb` of a step: "round-robin" deals them out (rank 1 gets
// none in step 2, which has one micro-batch); "rank0-only" leaves rank 1 idle every step.
int Owner(const std::string& assignment, std::size_t mb, int world_size) {
  if (assignment == "rank0-only") return 0;
  return static_cast<int>(mb % static_cast<std::size_t>(world_size));
}

// The micro-batches of `step` that `rank` runs (all of them when rank < 0).
std::vector<PackedBatch> MicroBatches(const ModelConfig& c, int step, const std::string& assignment,
                                      int rank, int world_size) {
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

AdamWOptions Adam(double eps, bool clip = false) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.eps = eps;
  // Far below the tiny model's gradient norms (about 2 to 4): every step is clipped.
  if (clip) o.clip_grad = 0.05;
  return o;
}

// With clipping, the tests also run a schedule: one warmup step, then cosine decay.
double ScheduledLr(int step) {
  LrSchedule schedule;
  schedule.warmup_steps = 1;
  schedule.decay_style = LrDecayStyle::kCosine;
  schedule.min_lr = 1e-4;
  return LearningRate(schedule, AdamWOptions{}.lr, kSteps, step);
}

std::vector<float> Flatten(const Transformer& model) {
  std::vector<float> out;
  for (const at::Tensor& p : model.parameters()) Append(p, out);
  return out;
}

// The logits of the whole global batch of step 0 packed as one micro-batch.
std::vector<float> ForwardOutput(const Transformer& model) {
  Documents docs =
      RandomDocuments(kGlobalBatchLengths, 100, static_cast<int>(model.config().shape.vocab));
  std::vector<float> out;
  Append(model.Forward(PackDocuments(docs, model.config().shape.vocab)), out);
  return out;
}

// The mean next-token loss of step 0's global batch on `model`, with its target count.
std::pair<double, std::int64_t> EvalLoss(const Transformer& model) {
  at::NoGradGuard no_grad;
  const Documents docs =
      RandomDocuments(kGlobalBatchLengths, 100, static_cast<int>(model.config().shape.vocab));
  const PackedBatch batch = PackDocuments(docs, model.config().shape.vocab);
  const TokenLoss loss = SummedTokenLoss(model.Forward(batch), batch);
  return {loss.sum.item<double>() / static_cast<double>(loss.tokens), loss.tokens};
}

// One process training on the whole global batches (`clip`: clipped, on ScheduledLr). With
// `eval`, the losses are followed by step 0's batch's loss after each step (EvalLoss).
Outcome Reference(double eps, bool clip = false, bool eval = false) {
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

// Tensor parallelism over `group`: scenario "tp-forward" writes the logits of one batch
// (as the parameters), "tp-train:EPS" trains kSteps steps on the whole global batches (every
// tp rank runs every micro-batch) and writes the gathered full parameters.
void TensorParallelWorker(const std::string& scenario, CommGroup& group, Outcome& o) {
  const ModelConfig c = Tiny();
  Transformer model(c, 11, &group);
  if (scenario == "tp-forward") {
    o.parameters = ForwardOutput(model);
    return;
  }
  ReferenceTrainer trainer(model, Adam(std::stod(scenario.substr(9))));
  for (int step = 0; step < kSteps; ++step) {
    ReferenceStepResult r = trainer.Step(MicroBatches(c, step, "", -1, 1));
    o.losses.push_back(r.loss);
    o.targets.push_back(r.targets);
  }
  for (const NamedParameter& p : model.named_parameters()) {
    const std::string& n = p.name;
    if (n == "embed" || n == "head" || n.ends_with("norm"))
      Append(p.value.grad(), o.replicated_grads);
  }
  for (const NamedParameter& p : model.GatherFullParameters()) Append(p.value, o.parameters);
}

// Scenario "train:ASSIGNMENT:EPS" trains kSteps steps; "die" makes rank 1 exit with
// status 3 right after the rendezvous, "stall" makes it sleep 6 s (then exit with 4),
// while rank 0 tries to train and reports its error.
int WorkerMain(const std::string& scenario, const std::string& path) {
  at::set_num_threads(1);
  Outcome o;
  try {
    DistributedOptions options = DistributedOptionsFromEnvironment();  // the test edge
    const bool die = scenario == "die";
    const bool stall = scenario == "stall";
    options.timeout = std::chrono::milliseconds(die || stall ? 3000 : 20000);
    Rendezvous rendezvous(options);
    const bool tp = scenario.starts_with("tp-");
    std::unique_ptr<CommGroup> group_ptr = MakeCommGroup(rendezvous, tp ? "tp" : "dp");
    CommGroup& group = *group_ptr;
    if (tp) {
      TensorParallelWorker(scenario, group, o);
      group.Barrier();
      Write(o, path);
      return 0;
    }
    if (die && group.rank() == 1) std::_Exit(3);
    if (stall && group.rank() == 1) {
      // Alive but stuck (e.g. in a slow data loader): only the timeout can end rank 0's wait.
      std::this_thread::sleep_for(std::chrono::seconds(6));
      std::_Exit(4);
    }
    std::string assignment = "round-robin";
    double eps = 1e-4;
    if (!die && !stall) {
      const std::size_t colon = scenario.find(':', 6);
      assignment = scenario.substr(6, colon - 6);
      eps = std::stod(scenario.substr(colon + 1));
    }
    const ModelConfig c = Tiny();
    Transformer model(c, 11);
    AllReduceGradientSync sync(group);
    ReferenceTrainer trainer(model, Adam(eps), &sync);
    for (int step = 0; step < kSteps; ++step) {
      ReferenceStepResult r =
          trainer.Step(MicroBatches(c, step, assignment, group.rank(), group.size()));
      o.losses.push_back(r.loss);
      o.targets.push_back(r.targets);
    }
    o.parameters = Flatten(model);
    // No rank leaves (and rank 0 takes the store down) while another still needs it.
    group.Barrier();
  } catch (const std::exception& e) {
    // The class travels too: a lost peer must be an IoError, not an internal error.
    o.error =
        std::string(dynamic_cast<const IoError*>(&e) != nullptr ? "IoError: " : "") + e.what();
    for (char& ch : o.error) {
      if (ch == '\n') ch = ' ';
    }
  }
  Write(o, path);
  return 0;
}

// max |a - b| / max |b| per parameter tensor, the largest over the tensors.
double MaxParameterError(const std::vector<float>& a, const std::vector<float>& b) {
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

std::string EpsText(double eps) {
  std::ostringstream text;
  text.precision(17);
  text << eps;
  return text.str();
}

// Expects one rank's run to match the single-process reference: a clean exit, losses
// within 1e-5 relative, the same global target counts, parameters within `tolerance`
// (max-relative per tensor). Returns the parameter error, or -1 when a fatal check failed.
double ExpectRankMatchesReference(const RankRun& run, const Outcome& reference, double tolerance) {
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

// Trains with `world_size` ranks and expects every rank to match the single-process
// reference and the replicas to be bitwise identical.
void ExpectSameAsOneProcess(int world_size, const std::string& assignment, double eps,
                            double tolerance) {
  const Outcome reference = Reference(eps);
  std::vector<RankRun> runs =
      RunRanks(world_size, "--dp-worker", "train:" + assignment + ":" + EpsText(eps),
               std::chrono::seconds(60));
  for (int rank = 0; rank < world_size; ++rank) {
    const RankRun& run = runs[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    const double error = ExpectRankMatchesReference(run, reference, tolerance);
    if (error < 0) continue;
    std::cout << "[ dp=" << world_size << " " << assignment << " eps " << eps << " rank " << rank
              << " ] max parameter error " << error << "\n";
    // The all-reduce gives every rank the same bits, so the replicas never drift apart.
    EXPECT_TRUE(run.outcome.parameters == runs[0].outcome.parameters);
  }
}

// Adam eps 1e-4 removes the amplification of summation-order differences by 1 / eps
// (docs/runtime.md), so 1e-5 holds; with the default 1e-8 the parameters agree to ~1e-4.
// One rank runs exactly the single-process computation (the all-reduce over one rank is
// the identity), so it must match bit for bit.
TEST(DataParallelTest, OneRankMatchesOneProcess) {
  ExpectSameAsOneProcess(1, "round-robin", 1e-4, 0.0);
}

TEST(DataParallelTest, TwoRanksMatchOneProcess) {
  ExpectSameAsOneProcess(2, "round-robin", 1e-4, 1e-5);
}

TEST(DataParallelTest, TwoRanksMatchOneProcessWithDefaultEps) {
  ExpectSameAsOneProcess(2, "round-robin", AdamWOptions{}.eps, 1e-3);
}

// Rank 1 runs no micro-batch in any step yet joins every collective with zero gradients.
// Adding its zeros is exact, so the result is bit for bit the single-process one.
TEST(DataParallelTest, IdleRankStillSynchronises) {
  ExpectSameAsOneProcess(2, "rank0-only", 1e-4, 0.0);
}

TEST(DataParallelTest, DeadRankMakesTheOtherFailWithinTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankRun> runs = RunRanks(2, "--dp-worker", "die", std::chrono::seconds(30));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(runs[1].status, 3);
  ASSERT_EQ(runs[0].status, 0) << "rank 0 hung or crashed";
  const std::string& error = runs[0].outcome.error;
  EXPECT_EQ(error.find("IoError: rank 0 of 2, group 'dp' (gloo): all-reduce"), 0u) << error;
  EXPECT_NE(error.find("a peer rank may have exited"), std::string::npos) << error;
  // The 3 s Gloo timeout plus process start-up; a hang would reach the 30 s deadline.
  EXPECT_LT(seconds, 15.0);
  std::cout << "[ dead rank ] rank 0 failed after " << seconds << " s: " << error << "\n";
}

TEST(DataParallelTest, StuckRankMakesTheOtherFailAtTheTimeout) {
  std::vector<RankRun> runs = RunRanks(2, "--dp-worker", "stall", std::chrono::seconds(30));
  EXPECT_EQ(runs[1].status, 4);
  ASSERT_EQ(runs[0].status, 0) << "rank 0 hung or crashed";
  const std::string& error = runs[0].outcome.error;
  EXPECT_EQ(error.find("IoError: rank 0 of 2, group 'dp' (gloo): all-reduce"), 0u) << error;
  // Gloo's 3 s timeout, not rank 1's exit at 6 s, ended rank 0's wait.
  EXPECT_LT(runs[0].exit_s, runs[1].exit_s - 1.0);
  std::cout << "[ stuck rank ] rank 0 failed after " << runs[0].exit_s << " s (rank 1 exited at "
            << runs[1].exit_s << " s): " << error << "\n";
}

// Rows of the same matrix products split over two ranks and summed by the all-reduce:
// only the summation order differs from one process.
TEST(TensorParallelTest, TwoRanksForwardMatchesOneProcess) {
  const std::vector<float> reference = ForwardOutput(Transformer(Tiny(), 11));
  std::vector<RankRun> runs = RunRanks(2, "--dp-worker", "tp-forward", std::chrono::seconds(60));
  for (int rank = 0; rank < 2; ++rank) {
    const RankRun& run = runs[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(run.status, 0);
    ASSERT_EQ(run.outcome.error, "");
    ASSERT_EQ(run.outcome.parameters.size(), reference.size());
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < reference.size(); ++i) {
      diff =
          std::max(diff, static_cast<double>(std::abs(run.outcome.parameters[i] - reference[i])));
      scale = std::max(scale, static_cast<double>(std::abs(reference[i])));
    }
    EXPECT_LE(diff / scale, 1e-5);
    std::cout << "[ tp=2 forward rank " << rank << " ] max |logit error| " << diff
              << ", relative to max |logit| " << diff / scale << "\n";
    // The all-reduced activations are the same bits on every rank, so are the logits.
    EXPECT_TRUE(run.outcome.parameters == runs[0].outcome.parameters);
  }
}

void ExpectTensorParallelSameAsOneProcess(double eps, double tolerance) {
  const Outcome reference = Reference(eps);
  std::vector<RankRun> runs =
      RunRanks(2, "--dp-worker", "tp-train:" + EpsText(eps), std::chrono::seconds(60));
  for (int rank = 0; rank < 2; ++rank) {
    const RankRun& run = runs[static_cast<std::size_t>(rank)];
    SCOPED_TRACE("rank " + std::to_string(rank));
    const double error = ExpectRankMatchesReference(run, reference, tolerance);
    if (error < 0) continue;
    double loss_error = 0.0;
    for (std::size_t s = 0; s < reference.losses.size(); ++s) {
      loss_error = std::max(
          loss_error, std::abs(run.outcome.losses[s] - reference.losses[s]) / reference.losses[s]);
    }
    std::cout << "[ tp=2 eps " << eps << " rank " << rank << " ] max parameter error " << error
              << ", max relative loss error " << loss_error << "\n";
    // Replicated parameters see identical activations and gradients on every tp rank, so
    // their gradients (never all-reduced) agree bit for bit, as do the gathered parameters.
    ASSERT_FALSE(run.outcome.replicated_grads.empty());
    EXPECT_TRUE(run.outcome.replicated_grads == runs[0].outcome.replicated_grads);
    EXPECT_TRUE(run.outcome.parameters == runs[0].outcome.parameters);
  }
}

TEST(TensorParallelTest, TwoRanksTrainLikeOneProcess) {
  ExpectTensorParallelSameAsOneProcess(1e-4, 1e-5);
}

TEST(TensorParallelTest, TwoRanksTrainLikeOneProcessWithDefaultEps) {
  ExpectTensorParallelSameAsOneProcess(AdamWOptions{}.eps, 1e-3);
}

TEST(TensorParallelTest, RejectsShapesThatDoNotSplit) {
  const ModelConfig c = Tiny();  // heads 4, kv_heads 2, ffn 172
  ValidateTensorParallel(c, 1);
  ValidateTensorParallel(c, 2);
  EXPECT_THROW(ValidateTensorParallel(c, 0), InvalidInput);
  try {
    ValidateTensorParallel(c, 4);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "tensor parallelism: kv_heads = 2 is not divisible by tp = 4");
  }
  EXPECT_THROW(ValidateTensorParallel(c, 3), InvalidInput);
}

// Without a tp group the gather is a copy of the parameters.
TEST(TensorParallelTest, GatherWithoutGroupCopiesTheParameters) {
  Transformer model(Tiny(), 11);
  std::vector<float> gathered;
  for (const NamedParameter& p : model.GatherFullParameters()) Append(p.value, gathered);
  EXPECT_TRUE(gathered == Flatten(model));
}

TEST(DistributedOptionsTest, RejectsOutOfRangeOptions) {
  DistributedOptions o;
  o.world_size = 2;
  o.rank = 2;
  EXPECT_THROW(ValidateDistributedOptions(o), InvalidInput);
  o.rank = 1;
  o.master_port = 70000;
  EXPECT_THROW(ValidateDistributedOptions(o), InvalidInput);
  o.master_port = 29500;
  ValidateDistributedOptions(o);
}

TEST(DistributedOptionsTest, EnvironmentErrorsNameTheVariable) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "two", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  try {
    DistributedOptionsFromEnvironment();
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "environment: WORLD_SIZE: expected an integer, got 'two'");
  }
  setenv("WORLD_SIZE", "2", 1);
  unsetenv("MASTER_PORT");
  EXPECT_THROW(DistributedOptionsFromEnvironment(), InvalidInput);
  setenv("MASTER_PORT", "29501", 1);
  DistributedOptions o = DistributedOptionsFromEnvironment();
  EXPECT_EQ(o.world_size, 2);
  EXPECT_EQ(o.master_port, 29501);
  for (const char* k : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(k);
}

// ---- The distributed trainer: pipelines, heterogeneous strategies, sharded optimizer ----

// Candidate sets as text: candidates separated by '|', pipelines by ',', each "tXpY"
// (tp X, pp Y) or "tXpYcZ" (and cp Z), e.g. "t2p1,t1p1,t1p1|t1p2,t1p1,t1p1|t1p1c2,t1p1".
std::vector<Strategy> ParseCandidates(const std::string& text) {
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
int HandPlaced(int document, int step, int cp) {
  const int where = (document + step + 1) % (cp + 1);
  return where == cp ? kSharded : where;
}

// Where document `document` of step `step` lies with subsets (flag "subsets"): for cp >= 3 a
// cycle through rank sets of every width, non-contiguous ones included, so that step 2's
// single micro-batch of all seven documents holds on cp = 4 widths 1, 1, 2, 1, 4, 2 and 3
// at once (the 1- and 2-token documents over 2 ranks: empty chunks); cp = 2 as HandPlaced.
std::vector<int> SubsetPlaced(int document, int step, int cp) {
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
CpLayout RuleLayout(const std::vector<std::int64_t>& lengths, int cp) {
  const std::int64_t capacity = 4000;  // a rank holds 1000 tokens: any micro-batch here
  const ShardCost cost = MakeShardCost(cp, TimeModel{0.01, 0.1, 1.0}, capacity, 0.02, 0.0);
  return LayOutMicroBatch(lengths, cost);
}

// The step plan: the step's micro-batches (kStepSplits) dealt round-robin to the
// pipelines of candidate `strategy`, so with two pipelines the second gets none in step 2;
// each cp > 1 pipeline's micro-batches laid out by HandPlaced, or by RuleLayout with
// `rule_layouts`.
Plan PlanFor(int step, int strategy, const std::vector<Strategy>& candidates,
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

int TrainerWorkerMain(const std::string& scenario, const std::string& path) {
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

int WorldSize(const std::vector<Strategy>& candidates) {
  int world = 0;
  for (const Strategy& s : candidates) world = std::max(world, s.Gpus());
  return world;
}

// Runs the distributed trainer and expects every rank to match one process training on the
// same global batches (Adam eps 1e-4, parameters within 1e-5), and all ranks to hold the
// same parameters. `flag`: TrainerWorker's. Returns the worst parameter error.
double ExpectTrainerMatchesOneProcess(const std::string& candidates, const std::string& schedule,
                                      const std::string& flag = "",
                                      Recompute recompute = Recompute::kNone) {
  const double eps = 1e-4;
  const Outcome reference = Reference(eps, flag == "clip", flag == "eval");
  const int world = WorldSize(ParseCandidates(candidates));
  std::string scenario = candidates + "/" + schedule + "/" + EpsText(eps);
  if (!flag.empty() || recompute != Recompute::kNone) scenario += "/" + flag;
  if (recompute != Recompute::kNone) scenario += "/" + ToString(recompute);
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

// Clipping by the global norm over tp, pp, cp, dp and the ZeRO-1 shards, weight decay on
// matrices only and a per-step learning rate: equal to one process running torch's
// clip_grad_norm_ and torch::optim::AdamW with two parameter groups (parameters 1e-5, as
// every equivalence here; the clip coefficients differ by the float32 rounding of torch's
// norm).
TEST(OptimizationTest, ClippingDecayAndScheduleTrainLikeOneProcess) {
  // Clipping changes the result: the reference with it is not the one without.
  const Outcome clipped = Reference(1e-4, true);
  const Outcome plain = Reference(1e-4, false);
  double moved = 0;
  for (std::size_t i = 0; i < plain.parameters.size(); ++i) {
    moved =
        std::max(moved, static_cast<double>(std::abs(clipped.parameters[i] - plain.parameters[i])));
  }
  EXPECT_GT(moved, 1e-4);
  ExpectTrainerMatchesOneProcess("t2p1,t2p1", "0,0,0", "clip");
  ExpectTrainerMatchesOneProcess("t1p2,t1p2", "0,0,0", "clip");
  ExpectTrainerMatchesOneProcess("t2p1,t1p1,t1p1|t1p2,t1p1,t1p1", "0,1,0", "clip");
  ExpectTrainerMatchesOneProcess("t1p1c2,t1p1,t1p1", "0,0,0", "clip");
}

// ---- Context parallelism in the step: the cp ranks of a stage share its micro-batches ----
// Layouts by HandPlaced (PlanFor): odd lengths sharded, a 1- and a 2-token document sharded
// (empty chunks), micro-batches in which a rank holds no token, with and without a sharded
// document. Each cp rank's gradients join the optimizer's reduction like a dp replica's;
// a wrong local token, position, target, gather or gradient sum moves the parameters away
// from one process's.

TEST(ContextParallelTrainerTest, TwoCpRanksTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c2", "0,0,0");
}

TEST(ContextParallelTrainerTest, ThreeCpRanksTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c3", "0,0,0");
}

// <2,1,1> beside two <1,1,1> pipelines on 4 ranks: in step 2 (one micro-batch) the cp
// pipeline runs none and its ranks only join the reduction.
TEST(ContextParallelTrainerTest, CpPipelineBesideDataParallelOnesTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c2,t1p1,t1p1", "0,0,0");
}

// A cp strategy and cp = 1 ones in turn: the same ranks are cp peers in one step and
// separate pipelines or tp peers in the next; the optimizer state never moves.
TEST(ContextParallelTrainerTest, SwitchingBetweenCpAndNoCpTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c2,t1p1,t1p1|t2p1,t1p1,t1p1|t1p1c2,t1p1c2", "0,1,2");
  ExpectTrainerMatchesOneProcess("t1p1c2|t1p1,t1p1", "1,0,1");
}

// cp inside a tp group: each (cp rank, tp rank) holds its heads of its local tokens.
TEST(ContextParallelTrainerTest, CpTimesTpTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t2p1c2", "0,0,0");
}

// cp in a pipeline: each cp rank sends its local rows to the same cp rank of the next stage
// (step 0 sends a rank's empty share of a micro-batch).
TEST(ContextParallelTrainerTest, CpTimesPpTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p2c2", "0,0,0");
}

// The planner's layout rule (LayOutMicroBatch) instead of hand-made layouts.
TEST(ContextParallelTrainerTest, PlannerRuleLayoutsTrainLikeOneProcess) {
  int sharded = 0, placed = 0;
  for (int step = 0; step < kSteps; ++step) {
    const Plan plan = PlanFor(step, 0, ParseCandidates("t1p1c2"), "rule");
    for (const CpLayout& layout : plan.pipelines[0].cp_layouts) {
      for (std::size_t d = 0; d < layout.size(); ++d) (layout.Width(d) > 1 ? sharded : placed)++;
    }
  }
  // The rule must both shard and place documents, or this test checks only one of them.
  EXPECT_GT(sharded, 0);
  EXPECT_GT(placed, 0);
  ExpectTrainerMatchesOneProcess("t1p1c2", "0,0,0", "rule");
}

// Documents over any subset of the cp ranks (SubsetPlaced): on cp = 4 a micro-batch with
// widths 1, 2, 3 and 4 at once, non-contiguous rank sets, 1- and 2-token documents over
// 2 ranks, and every step a different layout.
TEST(ContextParallelTrainerTest, SubsetsOfFourCpRanksTrainLikeOneProcess) {
  const Plan plan = PlanFor(2, 0, ParseCandidates("t1p1c4"), "subsets");
  const CpLayout& layout = plan.pipelines[0].cp_layouts.at(0);
  std::vector<int> widths;
  for (std::size_t d = 0; d < layout.size(); ++d) widths.push_back(layout.Width(d));
  EXPECT_EQ(widths, (std::vector<int>{1, 1, 2, 1, 4, 2, 3}));
  ExpectTrainerMatchesOneProcess("t1p1c4", "0,0,0", "subsets");
}

// cp = 3 with subsets of two ranks ({0, 2} and {1, 2}) beside whole and full ones.
TEST(ContextParallelTrainerTest, SubsetsOfThreeCpRanksTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c3", "0,0,0", "subsets");
}

// Subsets inside tp groups: tp = 2 x cp = 4 on 8 ranks.
TEST(ContextParallelTrainerTest, SubsetsTimesTpTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t2p1c4", "0,0,0", "subsets");
}

// A subset-sharded cp = 3 pipeline beside a cp = 1 one, switching with a cp = 1 strategy.
TEST(ContextParallelTrainerTest, SubsetsInAHeterogeneousStrategyTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c3,t1p1|t2p1,t1p1,t1p1", "0,1,0", "subsets");
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

// cp ranks that disagree on a layout would gather mismatched keys: the plan-hash check
// stops the step first.
TEST(ContextParallelTrainerTest, RanksWithDifferentCpLayoutsFailWithAClearError) {
  std::vector<RankRun> runs = RunRanks(2, "--trainer-worker", "t1p1c2/0,0,0/0.0001/corrupt-layout",
                                       std::chrono::seconds(60));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 0);
    EXPECT_NE(run.outcome.error.find("the ranks hold different step plans"), std::string::npos)
        << run.outcome.error;
    EXPECT_EQ(run.outcome.losses.size(), 1u);  // step 0 ran
  }
}

TEST(ContextParallelTrainerTest, PlanWithoutCpLayoutsIsRejected) {
  std::vector<RankRun> runs =
      RunRanks(2, "--trainer-worker", "t1p1c2/0,0,0/0.0001/no-layouts", std::chrono::seconds(60));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 0);
    EXPECT_NE(run.outcome.error.find("needs the plan's cp_layouts"), std::string::npos)
        << run.outcome.error;
    EXPECT_TRUE(run.outcome.losses.empty());
  }
}

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

// The sharded AdamW is torch::optim::AdamW element by element (weight decay on matrices).
TEST(DistributedTrainerTest, AdamWUpdateMatchesTorch) {
  Transformer model(Tiny(), 11);
  ReferenceTrainer trainer(model, Adam(1e-8));
  const std::vector<PackedBatch> batch = MicroBatches(Tiny(), 0, "", -1, 1);
  std::vector<at::Tensor> before, exp_avg, exp_avg_sq;
  for (const at::Tensor& p : model.parameters()) {
    before.push_back(p.detach().clone());
    exp_avg.push_back(at::zeros_like(p));
    exp_avg_sq.push_back(at::zeros_like(p));
  }
  for (std::int64_t step = 1; step <= 2; ++step) {
    trainer.Step(batch);
    for (std::size_t i = 0; i < before.size(); ++i) {
      const at::Tensor grad = model.parameters()[i].grad();
      AdamWOptions options = Adam(1e-8);
      if (before[i].dim() == 1) options.weight_decay = 0;  // norms do not decay
      AdamWUpdate(before[i], grad, exp_avg[i], exp_avg_sq[i], step, options);
      EXPECT_TRUE(at::equal(before[i], model.parameters()[i].detach())) << "parameter " << i;
      before[i] = model.parameters()[i].detach().clone();
    }
  }
}

// The fused kernel a GPU uses (aten::_fused_adamw_, run here by its CPU kernel) tracks the
// reference update over ten steps of gradients from 1e-2 to 1e2: within 4 ulps of the
// parameters' scale (its own operation order rounds differently), with and without weight
// decay, on a shard whose length is no multiple of a vector width.
TEST(DistributedTrainerTest, FusedAdamWTracksTheReference) {
  for (const double decay : {0.0, 0.1}) {
    AdamWOptions o = Adam(1e-8);
    o.weight_decay = decay;
    at::manual_seed(3);
    const at::Tensor start = at::randn({100003});
    std::vector<at::Tensor> ref = {start.clone(), at::zeros_like(start), at::zeros_like(start)};
    std::vector<at::Tensor> fused = {start.clone(), at::zeros_like(start), at::zeros_like(start)};
    for (std::int64_t step = 1; step <= 10; ++step) {
      const at::Tensor grad =
          at::randn({100003}) * std::pow(10.0, static_cast<double>(step % 5 - 2));
      AdamWUpdate(ref[0], grad, ref[1], ref[2], step, o, AdamWKernel::kReference);
      AdamWUpdate(fused[0], grad, fused[1], fused[2], step, o, AdamWKernel::kFused);
      const double worst = (ref[0] - fused[0]).abs().max().item<double>();
      EXPECT_LE(worst, 4 * 1.2e-7 * ref[0].abs().max().item<double>()) << "step " << step;
    }
    EXPECT_GT((fused[0] - start).abs().max().item<double>(), 1e-3);  // the update ran
    for (const int moment : {1, 2}) {  // the moments too, to a few ulps of their scale
      EXPECT_LE((ref[moment] - fused[moment]).abs().max().item<double>(),
                4 * 1.2e-7 * ref[moment].abs().max().item<double>())
          << "moment " << moment;
    }
  }
  EXPECT_EQ(DefaultAdamWKernel(at::Device(at::kCPU)), AdamWKernel::kReference);
  EXPECT_EQ(DefaultAdamWKernel(at::Device(at::kCUDA, 0)), AdamWKernel::kFused);
}

// A checkpoint round-trips the optimizer state; damaged files are named in the error.
TEST(CheckpointTest, RoundTripAndDamagedFiles) {
  DistributedOptions options;
  options.master_port = test_support::FreePort();
  options.timeout = std::chrono::milliseconds(10000);
  Rendezvous rendezvous(options);
  std::unique_ptr<CommGroup> world_ptr = MakeCommGroup(rendezvous, "world");
  CommGroup& world = *world_ptr;
  const ModelConfig c = Tiny();
  ShardedAdamW a(Transformer(c, 11), world, Adam(1e-4));
  a.Step(nullptr);  // zero gradients: moves the weights by weight decay, counts a step
  const std::string dir = ::testing::TempDir() + "/hydraulis_ckpt_" + std::to_string(getpid());
  CheckpointMeta meta;
  meta.step = 7;
  meta.sampler_offset = 42;
  meta.seed = 5;
  SaveCheckpoint(dir, meta, a, c, world);
  const std::optional<std::string> path = LatestCheckpoint(dir);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, dir + "/step-00000007");

  ShardedAdamW b(Transformer(c, 12), world, Adam(1e-4));
  const CheckpointMeta loaded = LoadCheckpoint(*path, b);
  EXPECT_EQ(loaded.step, 7);
  EXPECT_EQ(loaded.sampler_offset, 42);
  EXPECT_EQ(loaded.world_size, 1);
  EXPECT_EQ(b.steps(), 1);
  EXPECT_TRUE(at::equal(a.full_parameters(), b.full_parameters()));
  EXPECT_TRUE(at::equal(a.shard_state().exp_avg_sq, b.shard_state().exp_avg_sq));

  ModelConfig bigger = c;
  bigger.shape.layers = 3;
  ShardedAdamW other(Transformer(bigger, 11), world, Adam(1e-4));
  try {
    LoadCheckpoint(*path, other);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("meta.json: parameters"), std::string::npos) << e.what();
  }
  auto load_error = [&](const std::string& checkpoint) {
    try {
      LoadCheckpoint(checkpoint, b);
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string shard = *path + "/rank-00000.bin";
  const std::string meta_path = *path + "/meta.json";
  const std::string pristine_shard = ReadFileText(shard), pristine_meta = ReadFileText(meta_path);
  // One flipped bit anywhere in the shard: the checksum names it.
  for (std::size_t at : {std::size_t{3}, pristine_shard.size() / 2, pristine_shard.size() - 1}) {
    std::string damaged = pristine_shard;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    WriteFileAtomically(shard, damaged);
    EXPECT_EQ(load_error(*path), shard + ": checksum mismatch (damaged shard)") << "byte " << at;
  }
  WriteFileAtomically(shard, pristine_shard.substr(0, pristine_shard.size() - 4));
  EXPECT_NE(load_error(*path).find(shard + ": " + std::to_string(pristine_shard.size() - 4) +
                                   " bytes, meta.json recorded"),
            std::string::npos);
  WriteFileAtomically(shard, pristine_shard);
  // meta.json edited (a step of 1000, or -4): its own checksum catches it.
  for (const char* step : {"1000", "-4"}) {
    std::string edited = pristine_meta;
    const std::size_t pos = edited.find("\"step\": 7");
    ASSERT_NE(pos, std::string::npos) << edited;
    edited.replace(pos, 9, std::string("\"step\": ") + step);
    WriteFileAtomically(meta_path, edited);
    EXPECT_NE(load_error(*path).find("meta.json: checksum mismatch"), std::string::npos);
  }
  WriteFileAtomically(meta_path, pristine_meta);
  EXPECT_EQ(load_error(*path), "no error");

  // `latest` deleted while a complete checkpoint exists: never a silent fresh start.
  std::filesystem::remove(dir + "/latest");
  try {
    LatestCheckpoint(dir);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("missing, but 1 complete checkpoint(s) exist (newest "
                                         "step-00000007)"),
              std::string::npos)
        << e.what();
  }
  // Keeping the newest 2: after steps 8 and 9, step 7 is gone.
  for (std::int64_t step : {8, 9}) {
    meta.step = step;
    SaveCheckpoint(dir, meta, a, c, world, 2);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000007"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-00000008/meta.json"));
  EXPECT_EQ(*LatestCheckpoint(dir), dir + "/step-00000009");
  // A shard that cannot be written (its name taken by a directory) fails the save on every
  // rank, removes the incomplete checkpoint and leaves `latest` as it was.
  std::filesystem::create_directories(dir + "/step-00000010/rank-00000.bin.tmp");
  meta.step = 10;
  EXPECT_THROW(SaveCheckpoint(dir, meta, a, c, world, 2), IoError);
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000010"));
  EXPECT_EQ(*LatestCheckpoint(dir), dir + "/step-00000009");
  // `latest` may only name a checkpoint of this directory: a path out of it (relative or
  // absolute) or a checkpoint that is a link out of it is refused, naming the file.
  const std::string outside = dir + "-outside";
  std::filesystem::create_directories(outside);
  std::filesystem::copy(dir + "/step-00000009", outside + "/step-00000011",
                        std::filesystem::copy_options::recursive);
  auto latest_error = [&](const std::string& pointer) {
    WriteFileAtomically(dir + "/latest", pointer + "\n");
    try {
      LatestCheckpoint(dir);
      return std::string("no error");
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
  };
  for (const std::string& pointer :
       {"../" + std::filesystem::path(outside).filename().string() + "/step-00000011",
        outside + "/step-00000011", std::string("step-00000009/.."), std::string("step-9")}) {
    EXPECT_NE(latest_error(pointer).find("not a checkpoint name of this directory"),
              std::string::npos)
        << pointer;
  }
  std::filesystem::create_directory_symlink(outside + "/step-00000011", dir + "/step-00000011");
  EXPECT_NE(latest_error("step-00000011").find("outside the checkpoint directory"),
            std::string::npos);
  EXPECT_EQ(latest_error("step-00000009"), "no error");
  std::filesystem::remove_all(outside);
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(LatestCheckpoint(dir).has_value());
}

// A Megatron corpus at `prefix` of 200 documents with the repository's real (Wikipedia)
// lengths cut to 700 tokens, and random token ids below `vocab`.
void WriteTestCorpus(const std::string& prefix, std::int64_t vocab) {
  std::ifstream lengths(std::string(HYDRAULIS_SOURCE_DIR) + "/data/wikipedia-sample-lengths.txt");
  MegatronDatasetWriter writer(prefix, MegatronDType::kUInt16);
  std::int64_t length = 0;
  for (int d = 0; d < 200 && lengths >> length; ++d) {
    const auto doc =
        test_support::RandomDocuments({static_cast<int>(std::min<std::int64_t>(length, 700))},
                                      static_cast<std::uint64_t>(d), static_cast<int>(vocab));
    writer.AddDocument(doc[0]);
  }
  writer.Finish();
}

// The training driver on one real Gloo rank: 4 steps straight equal 2 steps, a checkpoint,
// a new job resumed from it and 2 more steps, bit for bit (data order, plans, optimizer, the
// learning-rate schedule and clipping).
TEST(TrainingJobTest, ResumedRunEqualsUninterruptedRun) {
  const std::string dir = ::testing::TempDir() + "/hydraulis_job_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const ModelConfig c = Tiny();
  WriteTestCorpus(dir + "/corpus", c.shape.vocab);
  const MegatronDataset dataset(dir + "/corpus");
  std::vector<std::int64_t> lengths;
  for (std::size_t i = 0; i < dataset.num_documents(); ++i) {
    lengths.push_back(dataset.DocumentLength(i));
  }
  const Profile profile =
      LoadProfile(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/profiles/tiny-cpu.json");
  CandidateSet candidates;
  candidates.gpus = 1;
  candidates.optimizer_layout = {1, 1, 1};
  Strategy single;
  single.name = "1xtp1";
  single.pipelines.push_back(Scheme{});
  candidates.strategies.push_back(single);
  PlannerOptions planning;
  planning.context_tokens = 512;
  const Planner planner(profile, candidates, planning);
  const SamplerOptions sampling{2048, 512, 7, 0};

  // Runs steps [resume point, steps) of a job; returns the losses and final parameters.
  auto run = [&](int steps, int checkpoint_every, bool resume, std::uint64_t seed) {
    DistributedOptions options;
    options.master_port = test_support::FreePort();
    options.timeout = std::chrono::milliseconds(10000);
    Rendezvous rendezvous(options);
    DistributedTrainer trainer(c, 7, Adam(1e-8, /*clip=*/true), rendezvous, candidates.strategies);
    BatchSampler sampler(lengths, sampling);
    TrainingJobOptions job_options;
    job_options.steps = steps;
    // The schedule of a 4-step run (decay_steps fixed, so the 2-step first half follows it).
    job_options.lr_schedule.warmup_steps = 1;
    job_options.lr_schedule.decay_style = LrDecayStyle::kCosine;
    job_options.lr_schedule.decay_steps = 4;
    job_options.lr_schedule.min_lr = 1e-5;
    job_options.seed = seed;
    job_options.checkpoint_dir = dir + "/ckpt";
    job_options.checkpoint_every = checkpoint_every;
    job_options.max_len = 512;
    // Bit for bit needs the same plans: a fit from measured times would differ run to run.
    job_options.calibrate = false;
    const std::vector<DocumentPiece> pieces =
        MakeDocumentPieces(lengths, 512, LongDocuments::kTruncate, "corpus");
    TrainingJob job(planner, profile, sampler, dataset, pieces, trainer, job_options);
    if (resume) {
      EXPECT_TRUE(job.Resume().has_value());
    }
    std::vector<double> losses;
    while (!job.done()) losses.push_back(job.RunStep().result.loss);
    return std::make_pair(losses, trainer.optimizer().full_parameters().clone());
  };
  const auto straight = run(4, 0, false, 7);
  std::filesystem::remove_all(dir + "/ckpt");
  const auto first = run(2, 2, false, 7);
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt/step-00000002/meta.json"));
  EXPECT_THROW(run(4, 2, true, 8), InvalidInput);  // another seed would change the data order
  const auto second = run(4, 2, true, 7);
  ASSERT_EQ(straight.first.size(), 4u);
  ASSERT_EQ(second.first.size(), 2u);
  EXPECT_EQ(first.first[0], straight.first[0]);
  EXPECT_EQ(second.first[1], straight.first[3]);
  EXPECT_TRUE(at::equal(second.second, straight.second));
  std::filesystem::remove_all(dir);
}

// The set-up `hydraulis train` runs, in-process on one rank: TrainingRun builds from its
// options the same run as the pieces built by hand (same losses, bit for bit), and its
// checks name the flag a user gave.
TEST(TrainingRunTest, BuildsTheRunThePiecesBuildAndNamesBadFlags) {
  const std::string root = HYDRAULIS_SOURCE_DIR;
  const std::string dir = ::testing::TempDir() + "/hydraulis_run_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const ModelConfig c = Tiny();
  WriteTestCorpus(dir + "/corpus", c.shape.vocab);
  TrainingRunOptions options;
  options.model = root + "/configs/models/tiny.json";
  options.profile = root + "/configs/profiles/tiny-cpu.json";
  options.data = dir + "/corpus";
  options.tokens_per_batch = 2048;
  options.max_len = 512;
  options.adam = Adam(1e-8);
  options.job.steps = 3;
  options.job.seed = 7;
  options.job.calibrate = false;  // bit for bit: plans of the profile as given
  options.timeout_s = 10;

  std::vector<double> by_run;
  {
    DistributedOptions distributed;
    distributed.master_port = test_support::FreePort();
    TrainingRun run(options, distributed, 0);
    while (!run.job().done()) by_run.push_back(run.job().RunStep().result.loss);
  }
  std::vector<double> by_hand;
  {
    const MegatronDataset dataset(dir + "/corpus");
    std::vector<std::int64_t> lengths;
    for (std::size_t i = 0; i < dataset.num_documents(); ++i) {
      lengths.push_back(dataset.DocumentLength(i));
    }
    const Profile profile = LoadProfile(options.profile);
    CandidateSet candidates;
    candidates.gpus = 1;
    candidates.optimizer_layout = {1, 1, 1};
    candidates.strategies.push_back(Strategy{"1xtp1", {Scheme{}}});
    PlannerOptions planning;
    planning.context_tokens = 512;
    planning.seed = 7;
    const Planner planner(profile, candidates, planning);
    // What `train` does by default: documents over the context in pieces, and a batch never
    // cutting its last document to the budget.
    const std::vector<DocumentPiece> pieces =
        MakeDocumentPieces(lengths, 512, LongDocuments::kSplit, "corpus");
    std::vector<std::int64_t> piece_lengths;
    for (const DocumentPiece& p : pieces) piece_lengths.push_back(p.length);
    SamplerOptions sampling{2048, 512, 7};
    sampling.whole_documents = true;
    BatchSampler sampler(piece_lengths, sampling);
    DistributedOptions distributed;
    distributed.master_port = test_support::FreePort();
    distributed.timeout = std::chrono::milliseconds(10000);
    Rendezvous rendezvous(distributed);
    DistributedTrainer trainer(c, 7, Adam(1e-8), rendezvous, candidates.strategies);
    TrainingJobOptions job_options = options.job;
    job_options.long_documents = LongDocuments::kSplit;
    job_options.max_len = 512;
    TrainingJob job(planner, profile, sampler, dataset, pieces, trainer, job_options);
    while (!job.done()) by_hand.push_back(job.RunStep().result.loss);
  }
  ASSERT_EQ(by_run.size(), 3u);
  EXPECT_EQ(by_run, by_hand);

  auto error_of = [&](const TrainingRunOptions& o, int world) {
    try {
      CheckTrainingRun(o, world);
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainingRunOptions bad = options;
  bad.plan_algorithm = "kk";
  EXPECT_EQ(error_of(bad, 1), "--plan-algorithm: expected ours or static-fixed, got 'kk'");
  bad = options;
  bad.tp = 2;
  EXPECT_EQ(error_of(bad, 3), "train: --tp 2 x --pp 1 does not divide the 3 ranks");
  // --cp: the layout names it; a file of candidates sets cp itself; cp x pp is not derived.
  bad = options;
  bad.cp = 3;
  EXPECT_EQ(error_of(bad, 2), "train: --cp 3 x --tp 1 x --pp 1 does not divide the 2 ranks");
  bad = options;
  bad.cp = 2;
  bad.candidates = root + "/configs/candidates/cpu-2rank.json";
  EXPECT_EQ(error_of(bad, 2),
            "train: --cp 2 and --candidates: give one (a candidates file sets each scheme's cp)");
  bad = options;
  bad.cp = 2;
  bad.pp = 2;
  EXPECT_EQ(error_of(bad, 4),
            "train: --cp 2 x --tp 1 x --pp 2: " + options.profile +
                " has no (CP2,TP1,PP2) scheme, and cp schemes are derived only for --pp 1; "
                "profile it with `hydraulis profile` or use --pp 1");
  // The bundled profile has no <2,1,1>: --cp 2 derives it from <1,1,1>.
  bad = options;
  bad.cp = 2;
  EXPECT_EQ(error_of(bad, 2), "no error");
  bad = options;
  bad.comm_backend = "mpi";
  EXPECT_EQ(error_of(bad, 1), "--comm-backend: expected gloo or nccl, got 'mpi'");
  EXPECT_EQ(error_of(options, 1), "no error");
  std::filesystem::remove_all(dir);
}

// The first 500 lengths of the bundled Wikipedia sample, each divided by `divisor` (at
// least 1 token).
std::vector<std::int64_t> SampleLengths(std::int64_t divisor) {
  std::vector<std::int64_t> lengths;
  std::ifstream in(std::string(HYDRAULIS_SOURCE_DIR) + "/data/wikipedia-sample-lengths.txt");
  std::int64_t n = 0;
  for (int i = 0; i < 500 && in >> n; ++i) lengths.push_back(divisor == 1 ? n : n / divisor + 1);
  return lengths;
}

TEST(PlanAheadTest, GivesTheSynchronousStepsInOrderAndErrorsAtTheirStep) {
  const std::string root = HYDRAULIS_SOURCE_DIR;
  const Profile profile = LoadProfile(root + "/configs/profiles/tiny-cpu.json");
  const CandidateSet candidates =
      LoadCandidates(root + "/configs/candidates/cpu-2rank.json", profile);
  PlannerOptions planning;
  planning.context_tokens = 1024;
  const std::vector<std::int64_t> lengths = SampleLengths(1);
  const SamplerOptions sampling{6000, 1024, 3, 0};
  const Planner sync_planner(profile, candidates, planning);
  BatchSampler sync_sampler(lengths, sampling);
  const Planner planner(profile, candidates, planning);
  BatchSampler sampler(lengths, sampling);
  // Not owned: the planners live on this test's stack.
  auto borrowed = [](const Planner& p) { return std::shared_ptr<const Planner>(&p, [](auto*) {}); };
  {
    PlannerTimeline timeline(borrowed(planner), 0, 2);
    PlanAhead ahead(timeline, sampler, 0, 6, 2);
    for (int step = 0; step < 6; ++step) {
      const SampledBatch batch = sync_sampler.Next();
      const Plan plan = sync_planner.PlanBatch(batch.lengths);
      double waited_ms = -1;
      const PlanAhead::Step got = ahead.Next(waited_ms);
      EXPECT_GE(waited_ms, 0.0);
      EXPECT_EQ(got.batch.dataset_indices, batch.dataset_indices) << "step " << step;
      EXPECT_EQ(PlanToJson(got.plan, false, false), PlanToJson(plan, false, false));
      EXPECT_EQ(got.position_after.epoch, sync_sampler.position().epoch);
      EXPECT_EQ(got.position_after.offset, sync_sampler.position().offset);
      timeline.Publish(step);
    }
    double waited_ms = 0;
    EXPECT_THROW(ahead.Next(waited_ms), InternalError);
  }
  {
    // Destroyed with steps left, its thread waiting for a step to be published: the thread
    // stops without planning them.
    PlannerTimeline timeline(borrowed(planner), 0, 2);
    PlanAhead ahead(timeline, sampler, 0, 1'000'000, 2);
    double waited_ms = 0;
    ahead.Next(waited_ms);
  }
  // One document per batch; the overlong one cannot be planned under the reject rule.
  const std::vector<std::int64_t> with_overlong = {100, 200, 300, 50'000'000, 400, 500};
  PlannerOptions strict = planning;
  strict.overlong = OverlongRule::kReject;
  const SamplerOptions one_each{1, 1 << 30, 9, 1};
  BatchSampler order(with_overlong, one_each);
  int bad_step = 0;
  while (order.Next().lengths[0] != 50'000'000) ++bad_step;
  const Planner strict_planner(profile, candidates, strict);
  BatchSampler strict_sampler(with_overlong, one_each);
  PlannerTimeline timeline(borrowed(strict_planner), 0, 3);
  PlanAhead ahead(timeline, strict_sampler, 0, 6, 3);
  double waited_ms = 0;
  for (int step = 0; step < bad_step; ++step) {
    EXPECT_NO_THROW(ahead.Next(waited_ms));
    timeline.Publish(step);
  }
  EXPECT_THROW(ahead.Next(waited_ms), Infeasible);
  EXPECT_THROW(ahead.Next(waited_ms), Infeasible);
}

// A planner published after step k plans the steps after k + lag and no earlier one,
// whatever the look-ahead thread's timing, with its fit version; steps from a resumed first
// step start on the first planner.
TEST(PlanAheadTest, APublishedPlannerPlansTheStepsAfterTheLag) {
  const std::string root = HYDRAULIS_SOURCE_DIR;
  const Profile profile = LoadProfile(root + "/configs/profiles/tiny-cpu.json");
  Profile slow = profile;
  for (SchemeProfile& e : slow.schemes) e.c_ms *= 50;  // many small micro-batches cost more
  const CandidateSet candidates =
      LoadCandidates(root + "/configs/candidates/cpu-2rank.json", profile);
  PlannerOptions planning;
  planning.context_tokens = 1024;
  const std::vector<std::int64_t> lengths = SampleLengths(8);
  const SamplerOptions sampling{6000, 1024, 3, 0};
  auto first = std::make_shared<const Planner>(profile, candidates, planning);
  auto second = std::make_shared<const Planner>(slow, candidates, planning);
  BatchSampler sampler(lengths, sampling), reference(lengths, sampling);
  constexpr int kFirstStep = 5, kLastStep = 14, kLag = 2, kAdoptedAfter = 7;
  for (int i = 0; i < kFirstStep; ++i) reference.Next();
  sampler.Restore(reference.position());
  PlannerTimeline timeline(first, kFirstStep, kLag);
  PlanAhead ahead(timeline, sampler, kFirstStep, kLastStep, kLag);
  bool differs = false;
  for (int step = kFirstStep; step < kLastStep; ++step) {
    double waited_ms = 0;
    const PlanAhead::Step got = ahead.Next(waited_ms);
    const bool later = step > kAdoptedAfter + kLag;
    const Plan want = (later ? second : first)->PlanBatch(reference.Next().lengths);
    EXPECT_EQ(got.fit_version, later ? 1 : 0) << "step " << step;
    EXPECT_EQ(PlanToJson(got.plan, false, false), PlanToJson(want, false, false)) << step;
    if (later) {
      differs |= PlanToJson(first->PlanBatch(got.batch.lengths), false, false) !=
                 PlanToJson(want, false, false);
    }
    timeline.Publish(step, step == kAdoptedAfter ? second : nullptr, 1);
  }
  EXPECT_TRUE(differs) << "the two planners plan alike: the case does not test the switch";
  EXPECT_THROW(timeline.Publish(kFirstStep), InternalError);  // out of order
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  hydraulis::test_support::RestartWithOneThread(argv);
  if (argc == 4 && std::string(argv[1]) == "--dp-worker") {
    return hydraulis::WorkerMain(argv[2], argv[3]);
  }
  if (argc == 4 && std::string(argv[1]) == "--trainer-worker") {
    return hydraulis::TrainerWorkerMain(argv[2], argv[3]);
  }
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
