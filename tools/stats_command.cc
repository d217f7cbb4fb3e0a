#include "commands.h"
#include "hydraulis/base/error.h"

namespace hydraulis::tools {

Command AddStatsCommand(CLI::App& app) {
  app.add_subcommand("stats", "(being built)");
  return []() -> int { throw Error("stats: being built"); };
}

}  // namespace hydraulis::tools
