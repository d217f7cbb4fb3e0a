// The flags of `hydraulis plan`: what they bind to, their defaults and their help.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "length_flags.h"
#include "planning_inputs.h"

namespace hydraulis::tools {

// Every flag of `plan`, as given (or defaulted).
struct PlanArgs {
  PlanningInputFlags inputs;
  std::string lengths, dataset, output, algorithm = "ours";
  std::uint64_t seed = 1;
  int steps = 1;
  std::int64_t tokens_per_batch = 200'000;
  std::int64_t max_len = 32'768;
  bool reject_overlong = false;
  bool pretty = false;
  bool no_timing = false;
  double backward_to_forward = 2.0;
  int threads = 0;
  double prune_tolerance = 0.0;
  std::string cp_layouts = "subsets";
  LengthFlags source;

  // Registers every flag on `cmd` (the order of its --help); `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
};

}  // namespace hydraulis::tools
