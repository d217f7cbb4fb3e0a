// The `hydraulis` command-line tool: the only place that reads flags.
#include <fmt/core.h>

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/runtime/launch/launcher.h"
#include "number_flags.h"
#ifdef HYDRAULIS_HAVE_RUNTIME
#include "hydraulis/runtime/model/compute.h"
#endif

namespace hydraulis::tools {
namespace {
std::vector<std::string>& MutableCommandLine() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace
const std::vector<std::string>& CommandLine() { return MutableCommandLine(); }

std::string RuntimeCommandSummary(std::string_view name) {
  for (const auto& command : kRuntimeCommands) {
    if (command.name == name) return std::string(command.summary);
  }
  throw InternalError("no runtime command " + std::string(name));
}
}  // namespace hydraulis::tools

#ifdef HYDRAULIS_HAVE_RUNTIME
namespace {
// kAllocatorTunables are read when the process starts, so `train` restarts itself once with
// them set, unless the user set GLIBC_TUNABLES.
void KeepFreedMemoryInTheHeap(int argc, char** argv) {
  if (argc < 2 || std::getenv("GLIBC_TUNABLES") != nullptr) return;
  if (std::string_view(argv[1]) != "train") return;  // profile sets these itself
  // Returns only on failure: then run as we are.
  hydraulis::RestartSelfWith({{"GLIBC_TUNABLES", hydraulis::kAllocatorTunables}},
                             std::vector<std::string>(argv, argv + argc));
}
}  // namespace
#endif

#ifdef HYDRAULIS_RUNTIME_SIBLING
namespace {
// Commands that need libtorch run in the sibling binary next to this one, with the same
// arguments; this binary never loads libtorch, so planning commands start at once.
bool NeedsRuntime(int argc, char** argv) {
  if (argc < 2) return false;
  const std::string_view first = argv[1];
  if (first == "--version") return true;
  for (const auto& command : hydraulis::tools::kRuntimeCommands) {
    if (command.name == first) return true;
  }
  return false;
}

// "train, profile, eval and export".
std::string RuntimeCommandList() {
  std::string out;
  const std::size_t n = std::size(hydraulis::tools::kRuntimeCommands);
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " and " : ", ";
    out += hydraulis::tools::kRuntimeCommands[i].name;
  }
  return out;
}

[[noreturn]] void RunSibling(char** argv) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string path = HYDRAULIS_RUNTIME_SIBLING;
  if (n > 0) {
    const std::string self(exe, static_cast<std::size_t>(n));
    path = self.substr(0, self.rfind('/') + 1) + HYDRAULIS_RUNTIME_SIBLING;
  }
  argv[0] = path.data();
  execv(path.c_str(), argv);
  fmt::print(stderr, "hydraulis: error: cannot run {}: {} (it holds {})\n", path,
             std::strerror(errno), RuntimeCommandList());
  std::exit(1);
}
}  // namespace
#endif

namespace {

// Every command, by the subcommand that runs it.
std::map<CLI::App*, hydraulis::tools::Command> AddCommands(CLI::App& app) {
  std::map<CLI::App*, hydraulis::tools::Command> commands;
  auto add = [&](auto adder) {
    std::size_t before = app.get_subcommands({}).size();
    auto cmd = adder(app);
    commands[app.get_subcommands({})[before]] = cmd;
  };
#ifdef HYDRAULIS_HAVE_RUNTIME
  // The runtime binary holds the commands that need libtorch, and nothing else.
  add(hydraulis::tools::AddTrainCommand);
  add(hydraulis::tools::AddProfileCommand);
  add(hydraulis::tools::AddEvalCommand);
  add(hydraulis::tools::AddExportCommand);
  // The table the planning binary lists and forwards must be what this binary registers.
  for (const auto& command : hydraulis::tools::kRuntimeCommands) {
    app.get_subcommand(std::string(command.name));  // throws when one is missing
  }
#else
  add(hydraulis::tools::AddPlanCommand);
  add(hydraulis::tools::AddImportProfileCommand);
  add(hydraulis::tools::AddSummarizeCommand);
  add(hydraulis::tools::AddStatsCommand);
  add(hydraulis::tools::AddProposeCommand);
  add(hydraulis::tools::AddSimulateCommand);
  add(hydraulis::tools::AddPreprocessCommand);
  add(hydraulis::tools::AddReportCommand);
  add(hydraulis::tools::AddReplayCommand);
#ifdef HYDRAULIS_RUNTIME_SIBLING
  // Listed for --help only: main() hands these to the sibling before parsing.
  for (const auto& command : hydraulis::tools::kRuntimeCommands) {
    app.add_subcommand(std::string(command.name),
                       std::string(command.summary) + " (runs hydraulis-runtime)");
  }
#endif
#endif
#ifdef HYDRAULIS_HAVE_RUNTIME
  // `train --config FILE`: train's flags in a TOML file, under [train] (docs/runtime.md).
  // CLI11 reads it; a flag on the command line overrides the file; an unknown key is an error.
  app.set_config("--config", "", "TOML file of a command's flags, under [train] (train only)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.get_subcommand("train")->fallthrough();
#endif
  return commands;
}

// The exit status when the command line is refused (or asks for help or the version).
std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ConfigError& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", hydraulis::tools::ConfigErrorMessage(app, e));
    return 2;
  } catch (const CLI::ConversionError& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", hydraulis::tools::ConversionErrorMessage(e));
    return 2;
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 2;
  }
  return std::nullopt;
}

// Runs the parsed command; a failure is one line on stderr and its exit status.
int RunParsedCommand(const std::map<CLI::App*, hydraulis::tools::Command>& commands) {
  try {
    for (auto& [sub, run] : commands) {
      if (!sub->parsed()) continue;
      const int status = run();
      hydraulis::FlushStdout();  // output lost (closed stdout, full disk) is a failure
      return status;
    }
  } catch (const std::system_error& e) {
    // fmt::print throws this when stdout refuses a write (closed, full device): the same
    // one line as FlushStdout's.
    if (std::ferror(stdout) == 0) {
      fmt::print(stderr, "hydraulis: internal error: {}\n", e.what());
      return 1;
    }
    fmt::print(stderr, "hydraulis: error: stdout: write failed: {}\n", e.code().message());
    return 1;
  } catch (const hydraulis::InternalError& e) {
    fmt::print(stderr, "hydraulis: internal error: {}\n", e.what());
    return 1;
  } catch (const hydraulis::Error& e) {
    // The user's input (or a batch no candidate can run): 2. A lost write, or training
    // stopped at a non-finite loss: 1.
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    const bool input = dynamic_cast<const hydraulis::InvalidInput*>(&e) != nullptr ||
                       dynamic_cast<const hydraulis::Infeasible*>(&e) != nullptr;
    return input ? 2 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hydraulis: internal error: {}\n", e.what());
    return 1;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef HYDRAULIS_RUNTIME_SIBLING
  if (NeedsRuntime(argc, argv)) RunSibling(argv);
#endif
#ifdef HYDRAULIS_HAVE_RUNTIME
  KeepFreedMemoryInTheHeap(argc, argv);
#endif
  hydraulis::tools::MutableCommandLine().assign(argv, argv + argc);
  CLI::App app{"hydraulis: per-step parallel strategies and data assignment for LLM training"};
  app.require_subcommand(1);
#ifdef HYDRAULIS_HAVE_RUNTIME
  const std::string runtime = "built against " + hydraulis::TorchBuildDescription();
#else
  const std::string runtime = "built without the training runtime (no PyTorch found)";
#endif
  app.set_version_flag("--version", std::string("hydraulis ") + HYDRAULIS_VERSION + ", " + runtime);
  const std::map<CLI::App*, hydraulis::tools::Command> commands = AddCommands(app);
  hydraulis::tools::CheckEveryNumber(app);
  if (const std::optional<int> refused = Parse(app, argc, argv)) return *refused;
  return RunParsedCommand(commands);
}
