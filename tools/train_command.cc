// `hydraulis train`: distributed training on the runtime, one process per rank. With
// --nproc N it starts N ranks of itself on this machine (launcher.h) and waits for them;
// without, it joins a job started by torchrun or Slurm through RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT. Every rank samples the same batches, plans them with the
// planner library and runs the plan (DistributedTrainer checks that all plans agree).
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/runtime/job/training_job.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/spec_io.h"
#include "launcher.h"
#include "number_flags.h"

namespace hydraulis::tools {
namespace {

struct TrainArgs {
  std::string model = "configs/models/tiny.json";
  std::string data;  // default: the demo corpus beside the build
  std::string profile = "configs/profiles/tiny-cpu.json";
  std::string candidates;
  std::string algorithm = "ours";
  std::string log_json;
  std::string device;        // cpu or cuda; empty: cuda when a GPU is visible, else cpu
  std::string precision;     // fp32 or bf16; empty: bf16 on cuda, fp32 on cpu
  std::string comm_backend;  // gloo or nccl; empty: nccl on cuda, gloo on cpu
  int nproc = 0;
  int tp = 1;
  int pp = 1;
  int steps = 10;
  std::int64_t tokens_per_batch = 8192;
  std::int64_t max_len = 1024;
  std::uint64_t seed = 1;
  double lr = 1e-3;
  std::int64_t ddp_bucket_size = kDefaultBucketElements;
  int master_port = 0;
  double timeout_s = 60;
  std::string checkpoint_dir;
  std::string init_from;  // a Hugging Face checkpoint to start from
  int checkpoint_every = 0;
  int keep_checkpoints = 0;
  bool resume = false;
  bool skip_nonfinite_steps = false;
  int poison_step = -1;  // testing: NaN parameters for this step's computation
  // Fault injection for the launcher tests: this rank exits with status 3 before this step.
  int fail_rank = -1;
  int fail_step = 0;
};

// build/<preset>/demo-corpus, beside the build's tools/ directory (scripts/build.sh makes it).
std::string DefaultCorpusPrefix() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "demo-corpus";
  std::string path(exe, static_cast<std::size_t>(n));
  path = path.substr(0, path.rfind('/'));  // .../tools
  return path.substr(0, path.rfind('/')) + "/demo-corpus";
}

// The candidate set this run chooses from: the file, or one strategy of world / (tp * pp)
// identical pipelines.
CandidateSet Candidates(const TrainArgs& a, const Profile& profile, int world) {
  if (!a.candidates.empty()) {
    CandidateSet set = LoadCandidates(a.candidates, profile);
    if (set.gpus != world) {
      throw InvalidInput(a.candidates + ": gpus: the candidate set is for " +
                         std::to_string(set.gpus) + " ranks, the job has " + std::to_string(world));
    }
    return set;
  }
  const int width = a.tp * a.pp;
  if (world % width != 0) {
    throw InvalidInput("train: --tp " + std::to_string(a.tp) + " x --pp " + std::to_string(a.pp) +
                       " does not divide the " + std::to_string(world) + " ranks");
  }
  Scheme scheme;
  scheme.tp = a.tp;
  scheme.pp = a.pp;
  if (profile.Find(scheme) == nullptr) {
    throw InvalidInput(a.profile + ": schemes: no entry for " + SchemeName(scheme) +
                       " (profile it with `hydraulis profile`, or pick a profiled --tp/--pp)");
  }
  CandidateSet set;
  set.gpus = world;
  set.optimizer_layout = {world, 1, 1};
  Strategy s;
  s.name = std::to_string(world / width) + "x" + SchemeName(scheme);
  s.pipelines.assign(static_cast<std::size_t>(world / width), scheme);
  set.strategies.push_back(s);
  return set;
}

// LOCAL_RANK as torchrun and the launcher set it (0 when absent): this rank's GPU.
int LocalRank() {
  const char* text = std::getenv("LOCAL_RANK");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1 << 16) {
    throw InvalidInput(std::string("environment: LOCAL_RANK: expected a GPU index, got '") + text +
                       "'");
  }
  return static_cast<int>(value);
}

// --device / --precision with their defaults, checked against this machine before any work.
ComputeOptions ResolveCompute(const TrainArgs& a, int local_rank) {
  ComputeOptions c = DefaultComputeOptions(local_rank);
  if (!a.device.empty()) {
    c.device = ParseDeviceKind(a.device, "--device");
    c.device_index = local_rank;
    c.precision = c.device == DeviceKind::kCuda ? Precision::kBf16 : Precision::kFp32;
  }
  if (!a.precision.empty()) c.precision = ParsePrecision(a.precision, "--precision");
  try {
    CheckComputeAvailable(c);
  } catch (const InvalidInput& e) {
    throw InvalidInput(std::string("--device ") + ToString(c.device) + " --precision " +
                       ToString(c.precision) + ": " + e.what());
  }
  return c;
}

// --comm-backend with its default (NCCL on cuda, Gloo on cpu), checked against the device.
CommBackend ResolveBackend(const TrainArgs& a, const ComputeOptions& compute) {
  if (a.comm_backend.empty()) {
    return compute.device == DeviceKind::kCuda ? CommBackend::kNccl : CommBackend::kGloo;
  }
  if (a.comm_backend == "gloo") return CommBackend::kGloo;
  if (a.comm_backend != "nccl") {
    throw InvalidInput("--comm-backend: expected gloo or nccl, got " +
                       QuoteForMessage(a.comm_backend));
  }
  if (compute.device != DeviceKind::kCuda) {
    throw InvalidInput("--comm-backend nccl needs --device cuda");
  }
  return CommBackend::kNccl;
}

// Everything a rank needs besides its peers, loaded and checked: the launcher runs this
// before starting any rank, so an input error is one line, not one per rank.
struct TrainInputs {
  ModelConfig model;
  Profile profile;
  CandidateSet candidates;
  std::unique_ptr<MegatronDataset> dataset;
  std::vector<std::int64_t> lengths;
  PlannerOptions options;
  std::unique_ptr<HfCheckpoint> init;  // --init-from, opened and validated
};

TrainInputs LoadTrainInputs(const TrainArgs& a, int world_size) {
  if (!a.candidates.empty() && (a.tp != 1 || a.pp != 1)) {
    throw InvalidInput("train: give --candidates or --tp/--pp, not both");
  }
  if (a.resume && a.checkpoint_dir.empty()) {
    throw InvalidInput("train: --resume needs --checkpoint-dir");
  }
  CheckCheckpointDir(a.checkpoint_dir, a.resume);
  TrainInputs in;
  const std::string model_source = a.init_from.empty() ? a.model : a.init_from + "/config.json";
  if (!a.init_from.empty()) {
    in.init = std::make_unique<HfCheckpoint>(a.init_from);
    in.model = in.init->config();
  } else {
    in.model = LoadModelConfig(a.model);
  }
  in.profile = LoadProfile(a.profile);
  if (in.profile.model.layers != in.model.shape.layers ||
      in.profile.model.hidden != in.model.shape.hidden) {
    throw InvalidInput(a.profile + ": model: profiled for " +
                       std::to_string(in.profile.model.layers) + " layers of hidden " +
                       std::to_string(in.profile.model.hidden) + ", " + model_source + " has " +
                       std::to_string(in.model.shape.layers) + " of " +
                       std::to_string(in.model.shape.hidden));
  }
  in.candidates = Candidates(a, in.profile, world_size);
  try {
    MakeShardLayout(MakeFlatLayout(in.model).numel, world_size, a.ddp_bucket_size);
  } catch (const InvalidInput& e) {
    throw InvalidInput(std::string("--ddp-bucket-size: ") + e.what());
  }
  in.dataset = std::make_unique<MegatronDataset>(a.data.empty() ? DefaultCorpusPrefix() : a.data);
  in.dataset->RequireIdsInVocabulary(in.model.shape.vocab, model_source);
  for (std::size_t i = 0; i < in.dataset->num_documents(); ++i) {
    in.lengths.push_back(in.dataset->DocumentLength(i));
  }
  in.options.algorithm = ParseAlgorithm(a.algorithm, "--algorithm");
  if (in.options.algorithm != Algorithm::kOurs && in.options.algorithm != Algorithm::kStaticFixed) {
    throw InvalidInput("train: --plan-algorithm must be ours or static-fixed, got " + a.algorithm);
  }
  in.options.context_tokens = a.max_len;
  in.options.seed = a.seed;
  // Both check the candidates against the profile and the budget against the data.
  const Planner planner(in.profile, in.candidates, in.options);
  const BatchSampler sampler(in.lengths, {a.tokens_per_batch, a.max_len, a.seed});
  return in;
}

int Train(const TrainArgs& a) {
  if (a.nproc > 0 && !IsLaunchedRank()) {
    // One clear line from the launcher, not one per rank: the checks every rank would fail.
    ResolveBackend(a, ResolveCompute(a, 0));
    LoadTrainInputs(a, a.nproc);
    return LaunchSelf(CommandLine(), a.nproc, a.master_port);
  }
  const ComputeOptions compute = ResolveCompute(a, LocalRank());
  const CommBackend backend = ResolveBackend(a, compute);
  DistributedOptions dist = DistributedOptionsFromEnvironment();
  dist.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
  dist.device_index = compute.device_index;
  dist.backend = backend;
  if (a.nproc > 0 && dist.world_size != a.nproc) {
    throw InvalidInput("train: WORLD_SIZE " + std::to_string(dist.world_size) + " != --nproc " +
                       std::to_string(a.nproc));
  }
  const TrainInputs in = LoadTrainInputs(a, dist.world_size);
  const ModelConfig& model = in.model;
  const CandidateSet& candidates = in.candidates;
  const MegatronDataset& dataset = *in.dataset;
  const Planner planner(in.profile, candidates, in.options);
  BatchSampler sampler(in.lengths, {a.tokens_per_batch, a.max_len, a.seed});

  Rendezvous rendezvous(dist);
  AdamWOptions adam;
  adam.lr = a.lr;
  DistributedTrainer trainer(model, a.seed, adam, rendezvous, candidates.strategies, compute,
                             in.init ? HfInitialWeights(*in.init) : InitialWeights(),
                             a.ddp_bucket_size);
  const bool chief = dist.rank == 0;
  TrainingJobOptions job_options;
  job_options.steps = a.steps;
  job_options.seed = a.seed;
  job_options.checkpoint_dir = a.checkpoint_dir;
  job_options.checkpoint_every = a.checkpoint_every;
  job_options.keep_checkpoints = a.keep_checkpoints;
  job_options.skip_nonfinite_steps = a.skip_nonfinite_steps;
  job_options.poison_step = a.poison_step;
  TrainingJob job(planner, sampler, dataset, trainer, job_options);
  if (a.resume) {
    const std::optional<std::string> path = job.Resume();
    if (chief && path) fmt::print("resumed from {} at step {}\n", *path, job.next_step());
    if (chief && !path) fmt::print("no checkpoint in {}; starting from step 0\n", a.checkpoint_dir);
  }
  std::ofstream log;
  if (chief && !a.log_json.empty()) {
    // A resumed run appends to the log of the run it continues.
    log.open(a.log_json, job.next_step() > 0 ? std::ios::app : std::ios::trunc);
    if (!log) throw InvalidInput("--log-json: cannot write " + a.log_json);
  }
  while (!job.done()) {
    if (dist.rank == a.fail_rank && job.next_step() == a.fail_step) {
      fmt::print(stderr, "hydraulis: rank {} failing at step {} as asked (--fail-rank)\n",
                 dist.rank, job.next_step());
      std::fflush(stderr);
      std::_Exit(3);
    }
    const TrainingStepRecord r = job.RunStep();
    if (!chief) continue;
    fmt::print(
        "step {:>4}  loss {:.4f}  tokens {:>7}  strategy {}{}  step {:.1f} ms  predicted {:.1f} "
        "ms{}{}\n",
        r.step, r.result.loss, r.tokens, r.strategy, r.switched ? " (switched)" : "",
        r.result.step_ms, r.predicted_step_ms,
        r.cut_documents > 0
            ? fmt::format("  cut {} doc(s), {} token(s)", r.cut_documents, r.cut_tokens)
            : "",
        r.skipped ? "  SKIPPED (non-finite)" : "");
    std::fflush(stdout);
    // One complete line per step, flushed, so a log read during or after a failed run
    // never holds half a record.
    if (log.is_open()) {
      log << StepLogLine(r, compute) << '\n' << std::flush;
      if (!log)
        throw IoError("--log-json " + a.log_json + ": write failed (step " +
                      std::to_string(r.step) + ")");
    }
  }
  trainer.world().Barrier();  // rank 0 hosts the store: no rank may still need it
  if (chief) {
    const TrainingJob::Totals& t = job.totals();
    fmt::print("done: {} document(s) cut to the context length or capacity ({} token(s) lost)",
               t.cut_documents, t.cut_tokens);
    if (a.skip_nonfinite_steps) fmt::print("; {} step(s) skipped (non-finite)", t.skipped_steps);
    fmt::print("\n");
  }
  return 0;
}

}  // namespace

Command AddTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a model on the runtime (Gloo), planning every step (docs/runtime.md)");
  auto a = std::make_shared<TrainArgs>();
  auto* model_flag =
      cmd->add_option("--model", a->model, "model config JSON")->capture_default_str();
  cmd->add_option("--init-from", a->init_from,
                  "start from a Hugging Face LLaMA checkpoint (config.json + safetensors) "
                  "instead of random weights; its config.json is the model")
      ->excludes(model_flag);
  cmd->add_option("--data", a->data,
                  "Megatron dataset prefix (PREFIX.bin/.idx); default: the bundled demo corpus");
  cmd->add_option("--profile", a->profile, "cost/memory profile of the model on this engine")
      ->capture_default_str();
  cmd->add_option("--device", a->device,
                  "cpu or cuda (one GPU per rank: LOCAL_RANK); default: cuda when a GPU is "
                  "visible, else cpu");
  cmd->add_option("--precision", a->precision,
                  "fp32 or bf16 (bf16 compute, fp32 master weights and optimizer state); "
                  "default: bf16 on cuda, fp32 on cpu");
  cmd->add_option("--comm-backend", a->comm_backend,
                  "gloo or nccl; default: nccl on cuda (one GPU per rank), gloo on cpu (gloo "
                  "also runs several ranks on one GPU, through host memory)");
  cmd->add_option("--nproc", a->nproc,
                  "start this many ranks here; without it, join a torchrun/Slurm job (RANK, "
                  "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
      ->check(PositiveNumber());
  cmd->add_option("--tp", a->tp, "tensor-parallel degree of every pipeline")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--pp", a->pp, "pipeline stages of every pipeline")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option(
      "--candidates", a->candidates,
      "candidate strategies JSON (heterogeneous, chosen per step) instead of --tp/--pp");
  cmd->add_option("--steps", a->steps, "training steps")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tokens-per-batch", a->tokens_per_batch, "tokens per global batch")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--max-len", a->max_len,
                  "documents are cut to this many tokens; static-fixed packs bins of it")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "model initialisation and data order")->capture_default_str();
  cmd->add_option("--plan-algorithm", a->algorithm, "ours or static-fixed")->capture_default_str();
  cmd->add_option("--log-json", a->log_json, "one JSON object per step (rank 0)");
  cmd->add_option("--lr", a->lr, "AdamW learning rate (0: a run that changes no parameter)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--ddp-bucket-size", a->ddp_bucket_size,
                  "elements per gradient bucket: one reduce-scatter and one all-gather each, "
                  "started during backward (as Megatron's flag)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--master-port", a->master_port, "rendezvous port with --nproc (0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--timeout-s", a->timeout_s,
                  "a rank that died or hangs fails the others after this long")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir,
                  "save checkpoints here (at the end, and every --checkpoint-every steps)");
  cmd->add_option("--checkpoint-every", a->checkpoint_every,
                  "steps between checkpoints (0: end only)")
      ->check(NonNegativeNumber());
  cmd->add_option("--keep-checkpoints", a->keep_checkpoints,
                  "keep only the newest K complete checkpoints (0: all)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_flag("--resume", a->resume,
                "continue from the newest checkpoint in --checkpoint-dir (if any); --steps is "
                "the total");
  cmd->add_flag("--skip-nonfinite-steps", a->skip_nonfinite_steps,
                "skip (and count) a step whose loss or gradient norm is not finite, instead of "
                "stopping with an error before its update");
  cmd->add_option("--poison-step", a->poison_step, "testing: NaN parameters during this step")
      ->group("");
  cmd->add_option("--fail-rank", a->fail_rank, "testing: this rank exits with status 3")->group("");
  cmd->add_option("--fail-step", a->fail_step, "testing: the step before which it exits")
      ->group("");
  return [a] { return Train(*a); };
}

}  // namespace hydraulis::tools
