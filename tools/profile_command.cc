// `hydraulis profile`: placeholder until the profiler lands.
#include "commands.h"

namespace hydraulis::tools {

Command AddProfileCommand(CLI::App& app) {
  app.add_subcommand("profile", "Fit the cost model of a model's schemes on this engine");
  return [] { return 1; };
}

}  // namespace hydraulis::tools
