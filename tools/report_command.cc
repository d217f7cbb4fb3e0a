#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"

namespace hydraulis::tools {

namespace {

struct ReportArgs {
  std::string log;
  std::string output;
};

// The plotting lives in Python (hydraulis.report, on matplotlib); this command hands over to
// it, so `hydraulis report` and `python -m hydraulis.report` are one implementation.
int RunReport(const ReportArgs& a) {
  const std::string python = PackagePython();
  std::vector<std::string> args = {python, "-m", "hydraulis.report", a.log, "-o", a.output};
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp(argv[0], argv.data());
  throw InvalidInput("report: cannot run " + python + " (" + std::strerror(errno) +
                     "); set HYDRAULIS_PYTHON to a Python with the hydraulis package and "
                     "matplotlib (scripts/build.sh installs both into .venv)");
}

}  // namespace

Command AddReportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "report", "Plot a `train --log-json` log: loss, lr, tokens/s, predicted vs measured step");
  auto a = std::make_shared<ReportArgs>();
  cmd->add_option("log", a->log, "the JSON-lines log of `hydraulis train --log-json`")->required();
  cmd->add_option("-o,--output", a->output, "report.html (figure, summary, config) or .png")
      ->required();
  return [a] { return RunReport(*a); };
}

}  // namespace hydraulis::tools
