// `hydraulis profile`: fits the planner's cost model of a model's schemes on this engine
// (the driver is job/profile_run.h; docs/runtime.md, "Profiler") and writes the profile.
// Schemes with tp > 1 need tp ranks: with --nproc N it starts N ranks of itself (as train
// does), otherwise it joins a torchrun-style job, or runs as one process when every scheme
// has tp = 1. The process runs under the timing environment (timing_environment.h),
// restarting itself into it when needed. Its flags are profile_args.h's.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/profile_run.h"
#include "hydraulis/runtime/launch/launcher.h"
#include "hydraulis/spec/spec_io.h"
#include "profile_args.h"
#include "profile_fit_table.h"
#include "timing_environment.h"

namespace hydraulis::tools {
namespace {

// Profiling takes minutes: a file that cannot be written should fail before, not after.
void RequireFolderOf(const std::string& path, const std::string& flag) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!folder.empty() && !std::filesystem::is_directory(folder, error)) {
    throw InvalidInput(flag + ": folder " + folder.string() + " of " + path + " does not exist");
  }
}

int RunProfileCommand(const ProfileArgs& a) {
  int max_tp = 1;
  for (const Scheme& s : a.options.schemes) max_tp = std::max(max_tp, s.tp);
  for (const Scheme& s : a.options.schemes) {
    if (a.nproc > 0 && a.nproc < s.cp * s.tp) {
      throw InvalidInput("--nproc: " + std::to_string(a.nproc) +
                         " cannot run cp = " + std::to_string(s.cp) + " (it needs at least " +
                         std::to_string(s.cp * s.tp) + " ranks)");
    }
  }
  if (a.nproc > 0 && a.nproc < max_tp) {
    throw InvalidInput("--nproc: " + std::to_string(a.nproc) +
                       " cannot run tp = " + std::to_string(max_tp) + " (it needs at least " +
                       std::to_string(max_tp) + " ranks)");
  }
  // Checked before ranks start; each rank then takes the GPU its LOCAL_RANK names.
  (void)ResolveComputeOptions(a.device, a.precision, 0, "--device", "--precision");
  ProfileOptions checked = a.options;
  checked.compute.recompute = ParseRecompute(a.recompute, "--recompute-granularity");
  const char* env_world = std::getenv("WORLD_SIZE");
  CheckProfileOptions(checked,
                      a.nproc > 0 ? a.nproc : (env_world != nullptr ? std::atoi(env_world) : 1));
  if (a.nproc > 0 && !IsLaunchedRank()) {
    SetTimingEnvironment();  // the ranks inherit it
    return LaunchSelf(CommandLine(), a.nproc, a.master_port, a.verbose);
  }
  if (!HasTimingEnvironment()) RestartWithTimingEnvironment();
  RequireFolderOf(a.output, "--output");
  if (!a.samples_json.empty()) RequireFolderOf(a.samples_json, "--samples-json");
  std::optional<DistributedOptions> distributed;
  if (a.nproc > 0 || std::getenv("RANK") != nullptr) {
    distributed = DistributedOptionsFromEnvironment();
    distributed->timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
    if (a.nproc > 0 && distributed->world_size != a.nproc) {
      throw InvalidInput("profile: WORLD_SIZE " + std::to_string(distributed->world_size) +
                         " != --nproc " + std::to_string(a.nproc));
    }
  }
  ProfileOptions options = a.options;
  options.compute = ResolveComputeOptions(
      a.device, a.precision, ParseLocalRank(std::getenv("LOCAL_RANK")), "--device", "--precision");
  options.compute.recompute = checked.compute.recompute;
  const ProfileRun run =
      RunProfile(options, distributed ? &*distributed : nullptr,
                 [](const Scheme& scheme, std::size_t micro_batches, double seconds) {
                   fmt::print(stderr, "profiled {}: {} micro-batches in {:.0f} s\n",
                              SchemeName(scheme), micro_batches, seconds);
                 });
  if (run.rank != 0) return 0;
  WriteFileAtomically(a.output, ProfileToJson(run.profile));
  if (!a.samples_json.empty()) WriteFileAtomically(a.samples_json, ProfileSamplesToJson(run));
  PrintFitTable(run);
  fmt::print("wrote {} (capacity in tokens per micro-batch with the optimizer over {} rank{})\n",
             a.output, run.world_size, run.world_size == 1 ? "" : "s");
  return 0;
}

}  // namespace

Command AddProfileCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", RuntimeCommandSummary("profile"));
  auto a = std::make_shared<ProfileArgs>();
  a->AddTo(cmd);
  return [a] { return RunProfileCommand(*a); };
}

}  // namespace hydraulis::tools
