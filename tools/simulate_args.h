// The flags of `hydraulis simulate`: what they bind to, their defaults and their help.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "hydraulis/sim/simulator.h"
#include "length_flags.h"
#include "planning_inputs.h"

namespace hydraulis::tools {

// Every flag of `simulate`: the simulator's options directly, the rest as given.
struct SimulateArgs {
  PlanningInputFlags inputs;
  std::string lengths, system = "ours", json, trace, cp_layouts = "subsets";
  std::vector<int> trace_steps;
  bool quiet = false;
  bool no_communication = false;
  bool sync_blind = false;
  bool no_overlap = false;
  SimOptions options;
  LengthFlags source;

  // Registers every flag on `cmd` (the order of its --help); `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
};

}  // namespace hydraulis::tools
