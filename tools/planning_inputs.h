// --profile, --candidates and --recompute-granularity, the inputs `plan` and `simulate` plan
// with: registered and loaded alike by both.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"
#include "recompute_flag.h"

namespace hydraulis::tools {

// The profile (under --recompute-granularity) and the candidates checked against it.
struct PlanningInputs {
  Profile profile;
  CandidateSet candidates;
};

// The three flags and the files they name.
struct PlanningInputFlags {
  std::string profile, candidates;
  RecomputeFlag recompute;

  // Registers --profile, --candidates and --recompute-granularity on `cmd`, in that order;
  // `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
  // Reads the profile, applies --recompute-granularity to it, then reads the candidates
  // against the result.
  PlanningInputs Load() const;
};

}  // namespace hydraulis::tools
