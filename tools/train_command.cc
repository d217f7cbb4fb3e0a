// `hydraulis train`: distributed training on the runtime, one process per rank. With
// --nproc N it starts N ranks of itself on this machine (launcher.h) and waits for them;
// without, it joins a job started by torchrun or Slurm through RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT. The run itself is the runtime's TrainingRun
// (runtime/job/training_run.h); this file binds flags to its options and prints its steps.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/training_run.h"
#include "hydraulis/runtime/step/lr_schedule.h"
#include "hydraulis/spec/spec_io.h"
#include "launcher.h"
#include "number_flags.h"
#include "output_paths.h"
#include "parsed_option.h"

namespace hydraulis::tools {
namespace {

// `python -m hydraulis.tensorboard DIR` fed the log's lines on a pipe: TensorBoard's format
// comes from a maintained writer (tensorboardX), not from this program.
class EventWriter {
 public:
  explicit EventWriter(const std::string& dir) : dir_(dir) {
    std::string quoted = "'";
    for (const char c : dir) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    // A writer that died must fail the write, not kill this rank.
    std::signal(SIGPIPE, SIG_IGN);
    pipe_ = popen((PackagePython() + " -m hydraulis.tensorboard " + quoted).c_str(), "w");
    if (pipe_ == nullptr) {
      throw IoError("--tensorboard " + dir + ": cannot start the event writer (" +
                    std::strerror(errno) + ")");
    }
  }
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  ~EventWriter() {
    if (pipe_ != nullptr) pclose(pipe_);
  }

  void Write(const std::string& line) {
    if (std::fputs((line + "\n").c_str(), pipe_) == EOF || std::fflush(pipe_) != 0) {
      throw IoError("--tensorboard " + dir_ +
                    ": the event writer stopped (its message is above; scripts/requirements.txt "
                    "pins tensorboardX for .venv)");
    }
  }
  // Waits for the writer to write and close its files; IoError when it failed.
  void Close() {
    const int status = pclose(pipe_);
    pipe_ = nullptr;
    if (status != 0) {
      throw IoError("--tensorboard " + dir_ + ": the event writer failed (status " +
                    std::to_string(status) + "; its message is above)");
    }
  }

 private:
  std::string dir_;
  std::FILE* pipe_ = nullptr;
};

// The flags that are not the run's: how ranks start, where the log goes, fault injection.
struct TrainArgs {
  TrainingRunOptions run;
  std::string log_json;
  int nproc = 0;
  int master_port = 0;
  // Fault injection for the launcher tests: this rank exits with status 3 before this step.
  int fail_rank = -1;
  int fail_step = 0;
  bool verbose = false;      // --nproc: every rank's lines and the launcher's, not one per failure
  std::string calibrate;     // on or off (TrainingJobOptions::calibrate); "": on on the CPU
  std::string save_profile;  // where rank 0 writes the calibrated profile at the end
  std::string tensorboard;   // TensorBoard log directory (rank 0 streams its records there)
  const CLI::App* command = nullptr;  // to write the effective configuration
};

// --calibrate and --save-profile, checked before any rank starts: the saved profile is
// only the calibration's, and never over the profile the run reads.
void ResolveCalibration(TrainArgs& a) {
  // On a GPU the micro-batches are timed with CUDA events, a path no GPU has run yet
  // (scripts/gpu-check.sh checks it): off there until it has (docs/design.md,
  // "Calibration from measured steps").
  const bool cuda = ResolveCompute(a.run, 0).device == DeviceKind::kCuda;
  if (a.calibrate.empty()) a.calibrate = cuda ? "off" : "on";
  if (a.calibrate != "on" && a.calibrate != "off") {
    throw InvalidInput("--calibrate: expected on or off, got " + QuoteForMessage(a.calibrate));
  }
  a.run.job.calibrate = a.calibrate == "on";
  if (a.save_profile.empty()) return;
  if (!a.run.job.calibrate) {
    throw InvalidInput("--save-profile " + a.save_profile +
                       ": needs --calibrate on (with it off the profile is the one given)");
  }
  RequireWritableFile({"--save-profile", a.save_profile});
  const std::string input = a.run.profile.empty() ? a.run.engine_profile : a.run.profile;
  std::error_code ec;
  if (std::filesystem::equivalent(a.save_profile, input, ec)) {
    throw InvalidInput("--save-profile " + a.save_profile + ": is the profile this run reads (" +
                       input + "); write the calibrated one to another file");
  }
}

// The mean relative error of the predicted step time over the last steps, for the summary.
struct PredictionError {
  std::vector<double> errors;
  int fit_version = 0;
  void Add(const TrainingStepRecord& r) {
    if (r.result.step_ms > 0) {
      errors.push_back(std::abs(r.predicted_step_ms - r.result.step_ms) / r.result.step_ms);
    }
    fit_version = r.fit_version;
  }
  // Over the last `k` steps (fewer when the run had fewer).
  double Mean(std::size_t k, std::size_t& used) const {
    used = std::min(k, errors.size());
    double sum = 0;
    for (std::size_t i = errors.size() - used; i < errors.size(); ++i) sum += errors[i];
    return used > 0 ? sum / static_cast<double>(used) : 0.0;
  }
};

// Every flag of the run as a --config file reads it: written beside the checkpoints and into
// the first step record of --log-json, so a run can be repeated from its own directory.
std::string EffectiveConfig(const TrainArgs& a) {
  std::istringstream all(
      a.command->config_to_str(/*default_also=*/true, /*write_description=*/false));
  std::string out = "[train]\n";
  for (std::string line; std::getline(all, line);) {
    // Unset flags (no value, no default) stay unset; --model is the default --init-from
    // excludes.
    if (line.ends_with("=\"\"") || (!a.run.init_from.empty() && line.starts_with("model="))) {
      continue;
    }
    out += line + "\n";
  }
  return out;
}

// The build directory this executable lives in (build/<preset>, above its tools/), or ""
// when it cannot be read.
std::string BuildDirectory() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  std::string path(exe, static_cast<std::size_t>(n));
  path = path.substr(0, path.rfind('/'));  // .../tools
  return path.substr(0, path.rfind('/'));
}

// build/<preset>/demo-corpus, beside the build's tools/ directory (scripts/build.sh makes it).
std::string DefaultCorpusPrefix() {
  const std::string build = BuildDirectory();
  return build.empty() ? "demo-corpus" : build + "/demo-corpus";
}

// The bundled engine profile: relative to the working directory (the repository, where the
// commands run by default), else in the source tree the build directory belongs to.
std::string EngineProfilePath() {
  if (std::filesystem::exists(kEngineProfile)) return kEngineProfile;
  const std::string build = BuildDirectory();
  const std::string beside = build + "/../../" + kEngineProfile;
  return !build.empty() && std::filesystem::exists(beside) ? beside : kEngineProfile;
}

// LOCAL_RANK as torchrun and the launcher set it (0 when absent): this rank's GPU.
int LocalRank() { return ParseLocalRank(std::getenv("LOCAL_RANK")); }

void PrintStep(const TrainingStepRecord& r) {
  fmt::print(
      "step {:>4}  loss {:.4f}  lr {:.3e}  grad_norm {:.3g}  tokens {:>7}  strategy {}{}  step "
      "{:.1f} ms  predicted {:.1f} ms{}{}{}\n",
      r.step, r.result.loss, r.lr, r.result.grad_norm, r.tokens, r.strategy,
      r.switched ? " (switched)" : "", r.result.step_ms, r.predicted_step_ms,
      r.fit_version > 0 ? fmt::format(" (fit {})", r.fit_version) : "",
      r.cut_documents > 0
          ? fmt::format("  cut {} doc(s), {} token(s)", r.cut_documents, r.cut_tokens)
          : "",
      r.skipped ? "  SKIPPED (non-finite)" : "");
  std::fflush(stdout);
}

int Train(TrainArgs& a) {
  if (a.run.data.empty()) a.run.data = DefaultCorpusPrefix();
  if (a.run.profile.empty()) a.run.engine_profile = EngineProfilePath();
  if (a.nproc > 0 && !IsLaunchedRank()) {
    // One clear line from the launcher, not one per rank: the checks every rank would fail.
    RequireWritableFile({"--log-json", a.log_json});
    ResolveCalibration(a);
    CheckTrainingRun(a.run, a.nproc);
    return LaunchSelf(CommandLine(), a.nproc, a.master_port, a.verbose);
  }
  ResolveCalibration(a);
  const DistributedOptions dist = DistributedOptionsFromEnvironment();
  if (a.nproc > 0 && dist.world_size != a.nproc) {
    throw InvalidInput("train: WORLD_SIZE " + std::to_string(dist.world_size) + " != --nproc " +
                       std::to_string(a.nproc));
  }
  TrainingRun run(a.run, dist, LocalRank());
  TrainingJob& job = run.job();
  const bool chief = run.rank() == 0;
  // Every GPU rank says which GPU it took: a node where all ranks name cuda:0 is misconfigured.
  if (run.compute().device == DeviceKind::kCuda) {
    fmt::print("{}\n", DeviceLine(run.compute(), run.rank(), dist.world_size));
  }
  if (chief && run.profile_derived()) {
    fmt::print(
        "profile: derived from {} for this model's shape and recompute {} (no --profile; step "
        "times are estimates until `hydraulis profile` fits one)\n",
        kEngineProfile, ToString(run.compute().recompute));
  }
  if (chief && !run.derived_cp_scheme().empty()) {
    fmt::print(
        "profile: {} derived from its cp = 1 fit (placed documents as on the tp group, the "
        "key/value exchange at the simulator's link speeds; `hydraulis profile --schemes` "
        "fits it)\n",
        run.derived_cp_scheme());
  }
  if (a.run.resume) {
    const std::optional<std::string> path = job.Resume();
    if (chief && path) fmt::print("resumed from {} at step {}\n", *path, job.next_step());
    if (chief && !path) {
      fmt::print("no checkpoint in {}; starting from step 0\n", a.run.job.checkpoint_dir);
    }
  }
  const std::string config = EffectiveConfig(a);
  if (chief && !a.run.job.checkpoint_dir.empty()) {
    std::filesystem::create_directories(a.run.job.checkpoint_dir);
    WriteFileAtomically(a.run.job.checkpoint_dir + "/run.toml", config);
  }
  bool config_logged = false;
  std::ofstream log;
  if (chief && !a.log_json.empty()) {
    // A resumed run appends to the log of the run it continues.
    log.open(a.log_json, job.next_step() > 0 ? std::ios::app : std::ios::trunc);
    if (!log) throw InvalidInput("--log-json: cannot write " + a.log_json);
  }
  std::unique_ptr<EventWriter> events;
  if (chief && !a.tensorboard.empty()) events = std::make_unique<EventWriter>(a.tensorboard);
  PredictionError prediction;
  while (!job.done()) {
    if (run.rank() == a.fail_rank && job.next_step() == a.fail_step) {
      fmt::print(stderr, "hydraulis: rank {} failing at step {} as asked (--fail-rank)\n",
                 run.rank(), job.next_step());
      std::fflush(stderr);
      std::_Exit(3);
    }
    // Printed and logged before the step's checkpoint is saved (RunStep's on_step).
    job.RunStep([&](const TrainingStepRecord& r) {
      if (!chief) return;
      PrintStep(r);
      prediction.Add(r);
      if (!r.calibration_refused.empty()) {
        fmt::print("calibration: step {} not used: {}\n", r.step, r.calibration_refused);
      }
      // One complete line per step, flushed, so a log read during or after a failed run
      // never holds half a record.
      if (log.is_open()) {
        std::string line = StepLogLine(r, run.compute(), dist.world_size, run.profile_derived());
        if (!config_logged) {
          // The first record this process writes carries the run's configuration.
          nlohmann::json j = nlohmann::json::parse(line);
          j["config"] = config;
          line = j.dump();
          config_logged = true;
        }
        log << line << '\n' << std::flush;
        if (!log)
          throw IoError("--log-json " + a.log_json + ": write failed (step " +
                        std::to_string(r.step) + ")");
      }
      if (events) {
        events->Write(StepLogLine(r, run.compute(), dist.world_size, run.profile_derived()));
      }
    });
    if (const std::optional<EvaluationRecord> e = job.EvaluateIfDue(); e && chief) {
      fmt::print("eval   step {:4d}  loss {:.4f}  ppl {:.2f}  ({} tokens, {:.0f} ms)\n", e->step,
                 e->loss, std::exp(e->loss), e->tokens, e->eval_ms);
      if (log.is_open()) {
        log << EvaluationLogLine(*e) << '\n' << std::flush;
        if (!log) throw IoError("--log-json " + a.log_json + ": write failed (evaluation)");
      }
      if (events) events->Write(EvaluationLogLine(*e));
    }
  }
  if (events) events->Close();
  run.trainer().control().Barrier();  // rank 0 hosts the store: no rank may still need it
  if (chief) {
    const TrainingJob::Totals& t = job.totals();
    if (t.cut_documents == 0) {
      fmt::print("done: no token lost (--long-documents {})", a.run.long_documents);
    } else {
      fmt::print("done: {} document(s) cut to the context length or capacity ({} token(s) lost)",
                 t.cut_documents, t.cut_tokens);
    }
    if (a.run.job.skip_nonfinite_steps) {
      fmt::print("; {} step(s) skipped (non-finite)", t.skipped_steps);
    }
    fmt::print("\n");
    std::size_t used = 0;
    const double error = prediction.Mean(5, used);
    if (used > 0) {
      fmt::print(
          "prediction: step time predicted within {:.1f} % of measured over the last {} "
          "step(s) (fit {}{}){}\n",
          100 * error, used, prediction.fit_version,
          a.run.job.calibrate ? ", calibrated from measured steps" : ", the profile as given",
          error <= 0.10 ? ""
          : a.run.job.calibrate
              ? fmt::format("; not yet within 10 %: the calibration needs more steps (it "
                            "refits from the {}th on, over the newest {})",
                            a.run.job.calibration.holdout + 1, a.run.job.calibration.window)
              : std::string("; more than 10 % off: --calibrate on fits this machine"));
    }
    if (!a.save_profile.empty()) {
      WriteFileAtomically(a.save_profile, ProfileToJson(job.fit().profile));
      fmt::print("profile: the fit in use (version {}) written to {}\n", job.fit().version,
                 a.save_profile);
    }
  }
  return 0;
}

}  // namespace

// Megatron-LM's names: the schedule scales --lr per step (runtime/step/lr_schedule.h).
void AddOptimizationFlags(CLI::App* cmd, TrainArgs& a) {
  LrSchedule& s = a.run.job.lr_schedule;
  AdamWOptions& o = a.run.adam;
  cmd->add_option("--lr-warmup-steps", s.warmup_steps, "steps of linear warmup to --lr")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  AddEnumOption(cmd, "--lr-decay-style", s.decay_style, kLrDecayStyleNames,
                "after warmup: constant, or linear or cosine decay to --min-lr");
  cmd->add_option("--lr-decay-steps", s.decay_steps,
                  "the step where decay reaches --min-lr, warmup included (0: the last step)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--min-lr", s.min_lr, "where linear and cosine decay end")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--weight-decay", o.weight_decay,
                  "AdamW's decoupled weight decay, on matrices only (not norms or biases)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--adam-beta1", o.beta1, "AdamW's first-moment decay, in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--adam-beta2", o.beta2, "AdamW's second-moment decay, in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--adam-eps", o.eps, "AdamW's epsilon, > 0")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--clip-grad", o.clip_grad,
                  "clip the gradient to this global L2 norm before the update (0: never)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
}

Command AddTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", RuntimeCommandSummary("train"));
  auto a = std::make_shared<TrainArgs>();
  a->command = cmd;
  cmd->footer(
      "--config FILE: these flags from a TOML file, under [train], keys without -- (the "
      "command line overrides it; docs/runtime.md)");
  auto* model_flag =
      cmd->add_option("--model", a->run.model, "model config JSON")->capture_default_str();
  cmd->add_option("--init-from", a->run.init_from,
                  "start from a Hugging Face LLaMA checkpoint (config.json + safetensors) "
                  "instead of random weights; its config.json is the model")
      ->excludes(model_flag);
  cmd->add_option("--data", a->run.data,
                  "Megatron dataset prefix (PREFIX.bin/.idx); default: the bundled demo corpus");
  cmd->add_option("--profile", a->run.profile,
                  std::string("cost/memory profile of the model on this engine; default: ") +
                      kEngineProfile + " when it is the model's, else one derived from it");
  cmd->add_option("--device", a->run.device,
                  "cpu or cuda (one GPU per rank: LOCAL_RANK); default: cuda when a GPU is "
                  "visible, else cpu");
  cmd->add_option("--precision", a->run.precision,
                  "fp32 or bf16 (bf16 compute, fp32 master weights and optimizer state); "
                  "default: bf16 on cuda, fp32 on cpu");
  cmd->add_option("--eval-every", a->run.job.eval_every,
                  "evaluate the held-out documents every N steps and after the last (0: never): "
                  "their mean loss and perplexity, forward only on the run's layout")
      ->capture_default_str();
  cmd->add_option("--eval-data", a->run.eval_data,
                  "Megatron dataset prefix of the held-out documents (its first --eval-tokens "
                  "tokens); default: the last pieces of --data, left out of training");
  cmd->add_option("--eval-tokens", a->run.eval_tokens,
                  "tokens evaluated: whole documents (cut to --max-len) until this many")
      ->capture_default_str();
  cmd->add_option("--recompute-granularity", a->run.recompute,
                  "activation recomputation: none (keep every activation), selective (the "
                  "attention core and the MLP activation run again in the backward) or full "
                  "(each layer keeps its input only); the profile must be for it")
      ->capture_default_str();
  cmd->add_option("--comm-backend", a->run.comm_backend,
                  "gloo or nccl; default: nccl on cuda (one GPU per rank), gloo on cpu (gloo "
                  "also runs several ranks on one GPU, through host memory)");
  cmd->add_option("--nproc", a->nproc,
                  "start this many ranks here; without it, join a torchrun/Slurm job (RANK, "
                  "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
      ->check(PositiveNumber());
  cmd->add_option("--cp", a->run.cp,
                  "context-parallel degree of every pipeline (long documents sharded over cp "
                  "ranks); a <cp,tp,1> scheme the profile lacks is derived from its <1,tp,1>")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tp", a->run.tp, "tensor-parallel degree of every pipeline")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--pp", a->run.pp, "pipeline stages of every pipeline")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option(
      "--candidates", a->run.candidates,
      "candidate strategies JSON (heterogeneous, chosen per step) instead of --cp/--tp/--pp");
  cmd->add_option("--steps", a->run.job.steps, "training steps")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tokens-per-batch", a->run.tokens_per_batch, "tokens per global batch")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--max-len", a->run.max_len,
                  "context length: the most tokens a document trains in one piece; "
                  "static-fixed packs bins of it")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--long-documents", a->run.long_documents,
                  "a document over --max-len: split (context-length pieces, every token "
                  "trained once per epoch), truncate (the rest is lost) or reject (exit 2)")
      ->capture_default_str();
  cmd->add_option("--seed", a->run.job.seed, "model initialisation and data order")
      ->capture_default_str();
  cmd->add_option("--plan-algorithm", a->run.plan_algorithm, "ours or static-fixed")
      ->capture_default_str();
  cmd->add_option("--log-json", a->log_json, "one JSON object per step (rank 0)");
  cmd->add_option("--tensorboard", a->tensorboard,
                  "also write the step and evaluation records as TensorBoard scalars into this "
                  "directory, as they come (python -m hydraulis.tensorboard, tensorboardX)");
  cmd->add_option("--calibrate", a->calibrate,
                  "on: refit the cost model from the steps' measured times and plan on it; off: "
                  "keep the profile as given (default: on on the CPU, off on cuda)");
  cmd->add_option("--save-profile", a->save_profile,
                  "write the calibrated profile here at the end (the profile format, for plan, "
                  "propose, simulate and train --profile)");
  cmd->add_option("--lr", a->run.adam.lr,
                  "peak AdamW learning rate (0: a run that changes no parameter)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  AddOptimizationFlags(cmd, *a);
  cmd->add_option("--ddp-bucket-size", a->run.ddp_bucket_size,
                  "elements per gradient bucket: one reduce-scatter and one all-gather each, "
                  "started during backward (as Megatron's flag)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_flag("--verbose", a->verbose,
                "with --nproc: forward every rank's error lines and the launcher's messages "
                "(default: a failed job prints its cause once)");
  cmd->add_option("--master-port", a->master_port, "rendezvous port with --nproc (0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--timeout-s", a->run.timeout_s,
                  "a rank that died or hangs fails the others after this long")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a->run.job.checkpoint_dir,
                  "save checkpoints here (at the end, and every --checkpoint-every steps)");
  cmd->add_option("--checkpoint-every", a->run.job.checkpoint_every,
                  "steps between checkpoints (0: end only)")
      ->check(NonNegativeNumber());
  cmd->add_option("--keep-checkpoints", a->run.job.keep_checkpoints,
                  "keep only the newest K complete checkpoints (0: all)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_flag("--resume", a->run.resume,
                "continue from the newest checkpoint in --checkpoint-dir (if any); --steps is "
                "the total");
  cmd->add_flag("--skip-nonfinite-steps", a->run.job.skip_nonfinite_steps,
                "skip (and count) a step whose loss or gradient norm is not finite, instead of "
                "stopping with an error before its update");
  cmd->add_option("--poison-step", a->run.job.poison_step,
                  "testing: NaN parameters during this step")
      ->group("");
  cmd->add_option("--fail-rank", a->fail_rank, "testing: this rank exits with status 3")->group("");
  cmd->add_option("--fail-step", a->fail_step, "testing: the step before which it exits")
      ->group("");
  return [a] { return Train(*a); };
}

}  // namespace hydraulis::tools
