// `hydraulis profile`: fits the planner's cost model of a model's schemes on this engine
// (the driver is job/profile_run.h; docs/runtime.md, "Profiler") and writes the profile.
// Schemes with tp > 1 need tp ranks: with --nproc N it starts N ranks of itself (as train
// does), otherwise it joins a torchrun-style job, or runs as one process when every scheme
// has tp = 1. The process runs under the timing environment below, restarting itself into
// it when needed.
#include <fmt/core.h>
#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/profile_run.h"
#include "hydraulis/spec/spec_io.h"
#include "launcher.h"
#include "number_flags.h"
#include "parsed_option.h"

namespace hydraulis::tools {
namespace {

// The run's options, and what only the command needs: its files, ranks and rendezvous.
struct ProfileArgs {
  ProfileOptions options;
  std::string output;
  std::string samples_json;
  int nproc = 0;
  int master_port = 0;
  double timeout_s = 1800;
  bool verbose = false;  // --nproc: every rank's lines, not one per failure
  std::string device;    // empty: cuda when a GPU is visible, else cpu (as train)
  std::string precision;
  std::string recompute = "none";  // --recompute-granularity
};

// What the profile is measured under, set before the process starts because OpenBLAS and
// glibc read them when they load: one BLAS thread per rank (tp ranks share the cores), and a
// malloc that keeps freed memory (no mmap of its own per large tensor, no returning of the
// heap to the kernel), as a GPU's caching allocator keeps device memory. Without the latter
// every large tensor is page-faulted afresh and the profile measures the kernel rather than
// the engine (docs/runtime.md, "Profiler", has the figures). Training should run under the
// same settings.
const std::vector<EnvironmentSetting> kTimingEnvironment = {
    {"OMP_NUM_THREADS", "1"},
    {"OPENBLAS_NUM_THREADS", "1"},
    {"GLIBC_TUNABLES", kAllocatorTunables},
};

bool HasTimingEnvironment() {
  for (const EnvironmentSetting& s : kTimingEnvironment) {
    const char* current = std::getenv(s.name);
    if (current == nullptr || std::string(current) != s.value) return false;
  }
  return true;
}

// Re-executes this command with kTimingEnvironment (once: the new process has it). Returns
// only when that fails, after a warning; the profile is then measured as things are.
void RestartWithTimingEnvironment() {
  RestartSelfWith(kTimingEnvironment, CommandLine());
  fmt::print(stderr, "hydraulis: warning: could not restart with {}=1 and {}: {}\n",
             kTimingEnvironment[0].name, kTimingEnvironment[2].name, std::strerror(errno));
}

// "1x1,2x1,2x1x1" -> schemes in the given order: TPxPP, or CPxTPxPP for a cp scheme.
// InvalidInput naming --schemes.
std::vector<Scheme> ParseSchemes(const std::string& text) {
  std::vector<Scheme> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    std::vector<int> parts;
    try {
      std::size_t at = 0;
      while (true) {
        const std::size_t x = item.find('x', at);
        const std::string part = item.substr(at, x == std::string::npos ? x : x - at);
        if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) {
          throw std::invalid_argument("");
        }
        parts.push_back(std::stoi(part));
        if (x == std::string::npos) break;
        at = x + 1;
      }
      if (parts.size() != 2 && parts.size() != 3) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) +
                         " is not TPxPP or CPxTPxPP (e.g. 2x1, 2x1x1)");
    }
    Scheme s;
    if (parts.size() == 3) s.cp = parts[0];
    s.tp = parts[parts.size() - 2];
    s.pp = parts.back();
    if (s.cp < 1 || s.tp < 1 || s.pp < 1) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) + ": cp, tp and pp must be >= 1");
    }
    if (std::find(out.begin(), out.end(), s) != out.end()) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) + " is listed twice");
    }
    out.push_back(s);
    begin = end + 1;
  }
  return out;
}

// Profiling takes minutes: a file that cannot be written should fail before, not after.
void RequireFolderOf(const std::string& path, const std::string& flag) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!folder.empty() && !std::filesystem::is_directory(folder, error)) {
    throw InvalidInput(flag + ": folder " + folder.string() + " of " + path + " does not exist");
  }
}

void PrintFits(const ProfileRun& run) {
  const OptimizerLayout layout{run.world_size, 1, 1};
  fmt::print("{:<10} {:>14} {:>12} {:>10} {:>9} {:>9} {:>9} {:>10} {:>12}\n", "scheme",
             "a ms/tok^2", "b ms/tok", "c ms", "R^2", "max rel", "rms rel", "capacity",
             "kv ms/tok");
  for (std::size_t i = 0; i < run.fits.size(); ++i) {
    const TimeFit& f = run.fits[i];
    const Scheme& scheme = run.profile.schemes[i].scheme;
    // A cp scheme keeps its <1, tp, 1> a, b, c; its R^2 and errors are of the sharded
    // samples under those plus the fitted kv.
    fmt::print("{:<10} {:>14.4e} {:>12.4e} {:>10.3f} {:>9.4f} {:>9.3f} {:>9.3f} {:>10} {:>12}\n",
               SchemeName(scheme), f.model.a_ms_per_token2, f.model.b_ms_per_token, f.model.c_ms,
               f.r_squared, f.max_relative_error, f.rms_relative_error,
               CapacityTokens(run.profile, scheme, layout),
               scheme.cp > 1 ? fmt::format("{:.4e}", run.profile.schemes[i].kv_ms_per_token)
                             : std::string("-"));
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
    // The ranks inherit it.
    for (const EnvironmentSetting& e : kTimingEnvironment) setenv(e.name, e.value, 1);
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
  PrintFits(run);
  fmt::print("wrote {} (capacity in tokens per micro-batch with the optimizer over {} rank{})\n",
             a.output, run.world_size, run.world_size == 1 ? "" : "s");
  return 0;
}

}  // namespace

Command AddProfileCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", RuntimeCommandSummary("profile"));
  auto a = std::make_shared<ProfileArgs>();
  cmd->add_option("--model", a->options.model, "model config JSON")->required();
  AddParsedOption(cmd, "--schemes", a->options.schemes, ParseSchemes,
                  "comma-separated TPxPP schemes, e.g. 1x1,2x1,1x2, and CPxTPxPP cp schemes (tp 1, "
                  "pp 1; 1x1 listed too), e.g. 2x1x1: timed with every document sharded",
                  "1x1");
  cmd->add_option("--output,-o", a->output, "profile JSON to write (rank 0)")->required();
  cmd->add_option("--samples-json", a->samples_json,
                  "also write every measured micro-batch and its fitted time (rank 0)");
  cmd->add_option("--nproc", a->nproc,
                  "start this many ranks here (>= the largest tp); without it, join a "
                  "torchrun/Slurm job, or run alone when every tp is 1")
      ->check(PositiveNumber());
  cmd->add_option("--max-len", a->options.max_len, "longest document and largest micro-batch timed")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--min-len", a->options.min_len, "shortest single document timed")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--packed", a->options.packed,
                  "packed micro-batches timed (besides single documents)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--lengths", a->options.lengths,
                  "document lengths the packed micro-batches draw from")
      ->capture_default_str();
  cmd->add_option("--warmup", a->options.warmup, "untimed passes before timing")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--repeats", a->options.repeats, "timed passes; each sample is their median")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--memory-bytes", a->options.memory_bytes,
                  "memory per rank the profile's capacities are computed for")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "model initialisation, token ids and packed lengths")
      ->capture_default_str();
  cmd->add_flag("--verbose", a->verbose,
                "with --nproc: forward every rank's error lines and the launcher's messages "
                "(default: a failed job prints its cause once)");
  cmd->add_option("--device", a->device,
                  "cpu or cuda (one GPU per rank: LOCAL_RANK); default: cuda when a GPU is "
                  "visible, else cpu");
  cmd->add_option("--precision", a->precision, "fp32 or bf16; default: bf16 on cuda, fp32 on cpu");
  cmd->add_option("--recompute-granularity", a->recompute,
                  "activation recomputation the profile is for: none, selective or full (the "
                  "stages are timed under it; train --recompute-granularity must match)")
      ->capture_default_str();
  cmd->add_option("--master-port", a->master_port, "rendezvous port with --nproc (0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--timeout-s", a->timeout_s,
                  "a rank that died or hangs fails the others after this long (idle ranks wait "
                  "at a barrier while a scheme runs, so it must exceed the longest scheme)")
      ->check(PositiveNumber())
      ->capture_default_str();
  return [a] { return RunProfileCommand(*a); };
}

}  // namespace hydraulis::tools
