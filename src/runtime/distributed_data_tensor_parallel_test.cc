// Data- and tensor-parallel training of the ReferenceTrainer over real Gloo ranks.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/transformer.h"
#include "runtime/testing/gradient_sync.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/reference_trainer.h"
#include "runtime/testing/test_documents.h"
#include "runtime/testing/training_equivalence.h"

namespace hydraulis {
namespace {

using test_support::Adam;
using test_support::Append;
using test_support::Documents;
using test_support::EpsText;
using test_support::ExpectRankMatchesReference;
using test_support::Flatten;
using test_support::kGlobalBatchLengths;
using test_support::kSteps;
using test_support::MicroBatches;
using test_support::Outcome;
using test_support::RandomDocuments;
using test_support::RankRun;
using test_support::Reference;
using test_support::RunRanks;
using test_support::Tiny;

// The logits of the whole global batch of step 0 packed as one micro-batch.
std::vector<float> ForwardOutput(const Transformer& model) {
  Documents docs =
      RandomDocuments(kGlobalBatchLengths, 100, static_cast<int>(model.config().shape.vocab));
  std::vector<float> out;
  Append(model.Forward(PackDocuments(docs, model.config().shape.vocab)), out);
  return out;
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

}  // namespace

// Scenario "train:ASSIGNMENT:EPS" trains kSteps steps; "die" makes rank 1 exit with
// status 3 right after the rendezvous, "stall" makes it sleep 6 s (then exit with 4),
// while rank 0 tries to train and reports its error.
int test_support::DpWorkerMain(const std::string& scenario, const std::string& path) {
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

namespace {

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

}  // namespace
}  // namespace hydraulis
