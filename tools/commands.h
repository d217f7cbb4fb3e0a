// Subcommands of the `hydraulis` tool. Each registers its flags on the app and returns the
// function that runs it (exit status).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>
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
Command AddReportCommand(CLI::App& app);
Command AddReplayCommand(CLI::App& app);
// Built only with the runtime (HYDRAULIS_BUILD_RUNTIME): they run the libtorch engine.
Command AddTrainCommand(CLI::App& app);
Command AddProfileCommand(CLI::App& app);
Command AddEvalCommand(CLI::App& app);
Command AddExportCommand(CLI::App& app);

// The commands that run the libtorch engine, written once: the runtime binary registers
// them, the planning binary hands them to its sibling and lists them in its help.
struct RuntimeCommand {
  std::string_view name;
  std::string_view summary;  // the --help line
};
inline constexpr RuntimeCommand kRuntimeCommands[] = {
    {"train", "Train a model on the runtime (Gloo), planning every step (docs/runtime.md)"},
    {"profile", "Fit the cost model of a model's schemes on this engine (docs/runtime.md)"},
    {"eval", "Per-document loss of a model (e.g. a Hugging Face checkpoint) on a dataset"},
    {"export",
     "Write a training checkpoint as a Hugging Face checkpoint (config.json + safetensors)"},
};
// The summary of runtime command `name` (InternalError when it is not one).
std::string RuntimeCommandSummary(std::string_view name);

// The interpreter that has the hydraulis package and its plotting and TensorBoard peers:
// HYDRAULIS_PYTHON when set, else the one this build was configured with (the project's
// .venv).
std::string PackagePython();

// The process's command line as main received it (the launcher re-runs it in each rank).
const std::vector<std::string>& CommandLine();

}  // namespace hydraulis::tools
