// The `hydraulis` command-line tool: the only place that reads flags.
#include <fmt/core.h>

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "number_flags.h"
#ifdef HYDRAULIS_HAVE_RUNTIME
#include "hydraulis/runtime/compute.h"
#endif

namespace hydraulis::tools {
namespace {
std::vector<std::string>& MutableCommandLine() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace
const std::vector<std::string>& CommandLine() { return MutableCommandLine(); }
}  // namespace hydraulis::tools

#ifdef HYDRAULIS_HAVE_RUNTIME
namespace {
// kAllocatorTunables are read when the process starts, so `train` restarts itself once with
// them set, unless the user set GLIBC_TUNABLES.
void KeepFreedMemoryInTheHeap(int argc, char** argv) {
  if (argc < 2 || std::getenv("GLIBC_TUNABLES") != nullptr) return;
  const std::string command = argv[1];
  if (command != "train") return;  // profile sets these and its thread count itself
  setenv("GLIBC_TUNABLES", hydraulis::tools::kAllocatorTunables, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}
}  // namespace
#endif

int main(int argc, char** argv) {
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
  hydraulis::tools::CheckEveryNumber(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, run] : commands) {
      if (!sub->parsed()) continue;
      const int status = run();
      hydraulis::FlushStdout();  // output lost (closed stdout, full disk) is a failure
      return status;
    }
  } catch (const hydraulis::InvalidInput& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 2;
  } catch (const hydraulis::Infeasible& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 2;
  } catch (const hydraulis::IoError& e) {
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 1;
  } catch (const hydraulis::InternalError& e) {
    fmt::print(stderr, "hydraulis: internal error: {}\n", e.what());
    return 1;
  } catch (const hydraulis::Error& e) {  // e.g. training stopped at a non-finite loss
    fmt::print(stderr, "hydraulis: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hydraulis: internal error: {}\n", e.what());
    return 1;
  }
  return 1;
}
