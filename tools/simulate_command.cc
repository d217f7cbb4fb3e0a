#include "commands.h"
#include "hydraulis/base/error.h"

namespace hydraulis::tools {

Command AddSimulateCommand(CLI::App& app) {
  app.add_subcommand("simulate", "(being built)");
  return []() -> int { throw Error("simulate: being built"); };
}

}  // namespace hydraulis::tools
