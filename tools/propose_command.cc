#include "commands.h"
#include "hydraulis/base/error.h"

namespace hydraulis::tools {

Command AddProposeCommand(CLI::App& app) {
  app.add_subcommand("propose", "(being built)");
  return []() -> int { throw Error("propose: being built"); };
}

}  // namespace hydraulis::tools
