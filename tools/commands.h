// Subcommands of the `hydraulis` tool. Each registers its flags on the app and returns the
// function that runs it (exit status).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace hydraulis::tools {

using Command = std::function<int()>;

Command AddPlanCommand(CLI::App& app);
Command AddImportProfileCommand(CLI::App& app);
Command AddSummarizeCommand(CLI::App& app);
Command AddStatsCommand(CLI::App& app);
Command AddProposeCommand(CLI::App& app);
Command AddSimulateCommand(CLI::App& app);
Command AddPreprocessCommand(CLI::App& app);
// Built only with the runtime (HYDRAULIS_BUILD_RUNTIME): they run the libtorch engine.
Command AddTrainCommand(CLI::App& app);
Command AddProfileCommand(CLI::App& app);
Command AddEvalCommand(CLI::App& app);
Command AddExportCommand(CLI::App& app);

// glibc malloc settings for CPU training and profiling: never mmap a block of its own, never
// return the heap to the kernel, as a GPU caching allocator keeps device memory. Otherwise
// every large tensor (a long document's attention scores) is page-faulted afresh: measured
// ~45 % of a CPU step in the kernel. Read when the process starts (docs/runtime.md).
inline constexpr char kAllocatorTunables[] =
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776";

// The process's command line as main received it (the launcher re-runs it in each rank).
const std::vector<std::string>& CommandLine();

}  // namespace hydraulis::tools
