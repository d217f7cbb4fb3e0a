// `hydraulis train`: distributed training on the runtime, one process per rank. With
// --nproc N it starts N ranks of itself on this machine (launcher.h) and waits for them;
// without, it joins a job started by torchrun or Slurm through RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT. The run itself is the runtime's TrainingRun
// (runtime/job/training_run.h); this file runs it with train_args.h's flags, printing
// (train_console.h) and logging (training_log.h) its steps.
#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "bundled_files.h"
#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/training_run.h"
#include "hydraulis/runtime/launch/launcher.h"
#include "hydraulis/spec/spec_io.h"
#include "measurements_file.h"
#include "output_paths.h"
#include "prediction_error.h"
#include "train_args.h"
#include "train_console.h"
#include "training_log.h"

namespace hydraulis::tools {
namespace {

// LOCAL_RANK as torchrun and the launcher set it (0 when absent): this rank's GPU.
int LocalRank() { return ParseLocalRank(std::getenv("LOCAL_RANK")); }

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
  PrintRunStart(run, dist.world_size);
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
  TrainingLog log(chief ? a.log_json : "", chief ? a.tensorboard : "", config, job.next_step() > 0);
  std::optional<MeasurementsFile> measured;
  if (chief && !a.save_measurements.empty()) {
    measured.emplace(a.save_measurements, job.measurements_header());
  }
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
      log.WriteStep(r, run.compute(), dist.world_size, run.profile_derived());
      if (measured && r.measured) measured->Write(r.step, *r.measured);
    });
    if (const std::optional<EvaluationRecord> e = job.EvaluateIfDue(); e && chief) {
      PrintEvaluation(*e);
      log.WriteEvaluation(*e);
    }
  }
  log.Close();
  run.trainer().control().Barrier();  // rank 0 hosts the store: no rank may still need it
  if (chief) {
    PrintRunEnd(job.totals(), a.run, prediction);
    if (!a.save_profile.empty()) {
      WriteFileAtomically(a.save_profile, ProfileToJson(job.fit().profile));
      fmt::print("profile: the fit in use (version {}) written to {}\n", job.fit().version,
                 a.save_profile);
    }
  }
  return 0;
}

}  // namespace

Command AddTrainCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", RuntimeCommandSummary("train"));
  auto a = std::make_shared<TrainArgs>();
  a->AddTo(cmd);
  return [a] { return Train(*a); };
}

}  // namespace hydraulis::tools
