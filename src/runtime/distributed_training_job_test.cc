// The training driver on a real Gloo rank: a resumed job, TrainingRun's set-up and flags, and
// PlanAhead's look-ahead planning.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/document_pieces.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/plan_ahead.h"
#include "hydraulis/runtime/job/training_job.h"
#include "hydraulis/runtime/job/training_run.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/spec/spec_io.h"
#include "hydraulis/spec/strategy.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/test_documents.h"
#include "runtime/testing/training_equivalence.h"

namespace hydraulis {
namespace {

using test_support::Adam;
using test_support::Tiny;

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

// The losses of the run `options` describes (one rank, the corpus in `dir`), built from
// the pieces by hand as TrainingRun builds it.
std::vector<double> LossesOfTheRunBuiltByHand(const TrainingRunOptions& options,
                                              const std::string& dir) {
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
  DistributedTrainer trainer(Tiny(), 7, Adam(1e-8), rendezvous, candidates.strategies);
  TrainingJobOptions job_options = options.job;
  job_options.long_documents = LongDocuments::kSplit;
  job_options.max_len = 512;
  TrainingJob job(planner, profile, sampler, dataset, pieces, trainer, job_options);
  std::vector<double> losses;
  while (!job.done()) losses.push_back(job.RunStep().result.loss);
  return losses;
}

// CheckTrainingRun names the flag a user gave, for variations of the good `options`.
void ExpectBadFlagsNamed(const TrainingRunOptions& options, const std::string& root) {
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
  const std::vector<double> by_hand = LossesOfTheRunBuiltByHand(options, dir);
  ASSERT_EQ(by_run.size(), 3u);
  EXPECT_EQ(by_run, by_hand);

  ExpectBadFlagsNamed(options, root);
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
