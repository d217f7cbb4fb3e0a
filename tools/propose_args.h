// The flags of `hydraulis propose`: what they bind to, their defaults and their help, and
// the parse of --optimizer-layout.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "hydraulis/propose/propose.h"
#include "length_flags.h"
#include "recompute_flag.h"

namespace hydraulis::tools {

// Every flag of `propose`; the long-context defaults (propose_long_context.h) may replace
// some of them before the run.
struct ProposeArgs {
  std::string profile, lengths, output = "-", optimizer_layout;
  int gpus = 0;
  std::int64_t max_len = 0;
  std::int64_t resolution = 128;
  std::int64_t tokens_per_batch = 200'000;
  int max_strategies = 0;
  int top_documents = 1;
  int select_batches = 0;
  std::uint64_t select_seed = 1;
  double select_tolerance = 0.0;
  bool select_tolerance_given = false;
  // Plan the --select-batches batches with the screening effort (the long-context default).
  bool screen = false;
  // The flags as given, to tell a default from a value the user chose.
  const CLI::Option* top_documents_flag = nullptr;
  const CLI::Option* max_strategies_flag = nullptr;
  const CLI::Option* select_batches_flag = nullptr;
  const CLI::Option* select_seed_flag = nullptr;
  CpSchemes cp_schemes = CpSchemes::kWhenNeeded;
  bool quiet = false;
  LengthFlags source;
  RecomputeFlag recompute;

  // Registers every flag on `cmd` (the order of its --help); `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
};

// --optimizer-layout "DP,TP,PP", three integers >= 1; InvalidInput naming the flag.
OptimizerLayout ParseOptimizerLayout(const std::string& text);

}  // namespace hydraulis::tools
