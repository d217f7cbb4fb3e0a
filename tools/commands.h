// Subcommands of the `hydraulis` tool. Each registers its flags on the app and returns the
// function that runs it (exit status).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace hydraulis::tools {

using Command = std::function<int()>;

Command AddPlanCommand(CLI::App& app);
Command AddImportProfileCommand(CLI::App& app);
Command AddSummarizeCommand(CLI::App& app);
Command AddStatsCommand(CLI::App& app);
Command AddProposeCommand(CLI::App& app);
Command AddSimulateCommand(CLI::App& app);

}  // namespace hydraulis::tools
