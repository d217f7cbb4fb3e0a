// The `hydraulis` command-line tool: the only place that reads flags.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"

namespace hydraulis::tools {
namespace {
std::vector<std::string>& MutableCommandLine() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace
const std::vector<std::string>& CommandLine() { return MutableCommandLine(); }
}  // namespace hydraulis::tools

int main(int argc, char** argv) {
  hydraulis::tools::MutableCommandLine().assign(argv, argv + argc);
  CLI::App app{"hydraulis: per-step parallel strategies and data assignment for LLM training"};
  app.require_subcommand(1);
  std::map<CLI::App*, hydraulis::tools::Command> commands;
  auto add = [&](auto adder) {
    std::size_t before = app.get_subcommands({}).size();
    auto cmd = adder(app);
    commands[app.get_subcommands({})[before]] = cmd;
  };
  add(hydraulis::tools::AddPlanCommand);
  add(hydraulis::tools::AddImportProfileCommand);
  add(hydraulis::tools::AddSummarizeCommand);
  add(hydraulis::tools::AddStatsCommand);
  add(hydraulis::tools::AddProposeCommand);
  add(hydraulis::tools::AddSimulateCommand);
  add(hydraulis::tools::AddPreprocessCommand);
#ifdef HYDRAULIS_HAVE_RUNTIME
  add(hydraulis::tools::AddTrainCommand);
  add(hydraulis::tools::AddProfileCommand);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const hydraulis::InvalidInput& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 2;
  } catch (const hydraulis::Infeasible& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hydraulis: internal error: {}\n", e.what());
    return 1;
  }
  return 1;
}
