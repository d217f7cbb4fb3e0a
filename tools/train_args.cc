#include "train_args.h"

#include <filesystem>
#include <sstream>
#include <system_error>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/step/lr_schedule.h"
#include "number_flags.h"
#include "output_paths.h"
#include "parsed_option.h"

namespace hydraulis::tools {
namespace {

// --lr and, by Megatron-LM's names, the schedule that scales it per step
// (runtime/step/lr_schedule.h), then AdamW's other options.
void AddOptimizationFlags(CLI::App* cmd, TrainArgs& a) {
  LrSchedule& s = a.run.job.lr_schedule;
  AdamWOptions& o = a.run.adam;
  cmd->add_option("--lr", a.run.adam.lr,
                  "peak AdamW learning rate (0: a run that changes no parameter)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
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

// What to train, on what, and where: the model, the data, the device and the evaluation.
void AddModelAndDataFlags(CLI::App* cmd, TrainArgs& a) {
  auto* model_flag =
      cmd->add_option("--model", a.run.model, "model config JSON")->capture_default_str();
  cmd->add_option("--init-from", a.run.init_from,
                  "start from a Hugging Face LLaMA, Mistral, Qwen2 or Qwen3 checkpoint "
                  "(config.json + safetensors) "
                  "instead of random weights; its config.json is the model")
      ->excludes(model_flag);
  cmd->add_option("--data", a.run.data,
                  "Megatron dataset prefix (PREFIX.bin/.idx); default: the bundled demo corpus");
  cmd->add_option("--profile", a.run.profile,
                  std::string("cost/memory profile of the model on this engine; default: ") +
                      kEngineProfile + " when it is the model's, else one derived from it");
  cmd->add_option("--device", a.run.device,
                  "cpu or cuda (one GPU per rank: LOCAL_RANK); default: cuda when a GPU is "
                  "visible, else cpu");
  cmd->add_option("--precision", a.run.precision,
                  "fp32 or bf16 (bf16 compute, fp32 master weights and optimizer state); "
                  "default: bf16 on cuda, fp32 on cpu");
  cmd->add_option("--eval-every", a.run.job.eval_every,
                  "evaluate the held-out documents every N steps and after the last (0: never): "
                  "their mean loss and perplexity, forward only on the run's layout")
      ->capture_default_str();
  cmd->add_option("--eval-data", a.run.eval_data,
                  "Megatron dataset prefix of the held-out documents (its first --eval-tokens "
                  "tokens); default: the last pieces of --data, left out of training");
  cmd->add_option("--eval-tokens", a.run.eval_tokens,
                  "tokens evaluated: whole documents (cut to --max-len) until this many")
      ->capture_default_str();
  cmd->add_option("--recompute-granularity", a.run.recompute,
                  "activation recomputation: none (keep every activation), selective (the "
                  "attention core and the MLP activation run again in the backward) or full "
                  "(each layer keeps its input only); the profile must be for it")
      ->capture_default_str();
  cmd->add_option("--comm-backend", a.run.comm_backend,
                  "gloo or nccl; default: nccl on cuda (one GPU per rank), gloo on cpu (gloo "
                  "also runs several ranks on one GPU, through host memory)");
}

// How the ranks split the model, and the batches they train.
void AddLayoutAndBatchFlags(CLI::App* cmd, TrainArgs& a) {
  cmd->add_option("--nproc", a.nproc,
                  "start this many ranks here; without it, join a torchrun/Slurm job (RANK, "
                  "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
      ->check(PositiveNumber());
  cmd->add_option("--cp", a.run.cp,
                  "context-parallel degree of every pipeline (long documents sharded over cp "
                  "ranks); a <cp,tp,1> scheme the profile lacks is derived from its <1,tp,1>")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tp", a.run.tp, "tensor-parallel degree of every pipeline")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--pp", a.run.pp, "pipeline stages of every pipeline")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option(
      "--candidates", a.run.candidates,
      "candidate strategies JSON (heterogeneous, chosen per step) instead of --cp/--tp/--pp");
  cmd->add_option("--steps", a.run.job.steps, "training steps")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tokens-per-batch", a.run.tokens_per_batch, "tokens per global batch")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--max-len", a.run.max_len,
                  "context length: the most tokens a document trains in one piece; "
                  "static-fixed packs bins of it")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--long-documents", a.run.long_documents,
                  "a document over --max-len: split (context-length pieces, every token "
                  "trained once per epoch), truncate (the rest is lost) or reject (exit 2)")
      ->capture_default_str();
  cmd->add_option("--seed", a.run.job.seed, "model initialisation and data order")
      ->capture_default_str();
  cmd->add_option("--plan-algorithm", a.run.plan_algorithm, "ours or static-fixed")
      ->capture_default_str();
}

// What the run writes besides its checkpoints.
void AddOutputFlags(CLI::App* cmd, TrainArgs& a) {
  cmd->add_option("--log-json", a.log_json, "one JSON object per step (rank 0)");
  cmd->add_option("--tensorboard", a.tensorboard,
                  "also write the step and evaluation records as TensorBoard scalars into this "
                  "directory, as they come (python -m hydraulis.tensorboard, tensorboardX)");
  cmd->add_option("--calibrate", a.calibrate,
                  "on: refit the cost model from the steps' measured times and plan on it; off: "
                  "keep the profile as given (default: on on the CPU, off on cuda)");
  cmd->add_option("--save-profile", a.save_profile,
                  "write the calibrated profile here at the end (the profile format, for plan, "
                  "propose, simulate and train --profile)");
  cmd->add_option("--save-measurements", a.save_measurements,
                  "write what each step measured here, as it comes (JSON lines: the plan and "
                  "its micro-batch times; `hydraulis replay` refits from them offline)");
}

// The ranks' communication and failures, checkpoints, and the testing flags.
void AddRankAndCheckpointFlags(CLI::App* cmd, TrainArgs& a) {
  cmd->add_option("--ddp-bucket-size", a.run.ddp_bucket_size,
                  "elements per gradient bucket: one reduce-scatter and one all-gather each, "
                  "started during backward (as Megatron's flag)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_flag("--verbose", a.verbose,
                "with --nproc: forward every rank's error lines and the launcher's messages "
                "(default: a failed job prints its cause once)");
  cmd->add_option("--master-port", a.master_port, "rendezvous port with --nproc (0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--timeout-s", a.run.timeout_s,
                  "a rank that died or hangs fails the others after this long")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a.run.job.checkpoint_dir,
                  "save checkpoints here (at the end, and every --checkpoint-every steps)");
  cmd->add_option("--checkpoint-every", a.run.job.checkpoint_every,
                  "steps between checkpoints (0: end only)")
      ->check(NonNegativeNumber());
  cmd->add_option("--keep-checkpoints", a.run.job.keep_checkpoints,
                  "keep only the newest K complete checkpoints (0: all)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_flag("--resume", a.run.resume,
                "continue from the newest checkpoint in --checkpoint-dir (if any); --steps is "
                "the total");
  cmd->add_flag("--skip-nonfinite-steps", a.run.job.skip_nonfinite_steps,
                "skip (and count) a step whose loss or gradient norm is not finite, instead of "
                "stopping with an error before its update");
  cmd->add_option("--poison-step", a.run.job.poison_step,
                  "testing: NaN parameters during this step")
      ->group("");
  cmd->add_option("--fail-rank", a.fail_rank, "testing: this rank exits with status 3")->group("");
  cmd->add_option("--fail-step", a.fail_step, "testing: the step before which it exits")->group("");
}

}  // namespace

void TrainArgs::AddTo(CLI::App* cmd) {
  command = cmd;
  cmd->footer(
      "--config FILE: these flags from a TOML file, under [train], keys without -- (the "
      "command line overrides it; docs/runtime.md)");
  AddModelAndDataFlags(cmd, *this);
  AddLayoutAndBatchFlags(cmd, *this);
  AddOutputFlags(cmd, *this);
  AddOptimizationFlags(cmd, *this);
  AddRankAndCheckpointFlags(cmd, *this);
}

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
  if (!a.save_measurements.empty()) {
    RequireWritableFile({"--save-measurements", a.save_measurements});
    a.run.job.record_measurements = true;
  }
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

}  // namespace hydraulis::tools
