// The flags of `hydraulis profile`: what they bind to, their defaults and their help.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "hydraulis/runtime/job/profile_run.h"

namespace hydraulis::tools {

// The run's options, and what only the command needs: its files, ranks and rendezvous.
struct ProfileArgs {
  ProfileOptions options;
  std::string output;
  std::string samples_json;
  int nproc = 0;
  int master_port = 0;
  double timeout_s = 1800;
  bool verbose = false;  // --nproc: every rank's lines, not one per failure
  std::string device;    // empty: cuda when a GPU is visible, else cpu (as train)
  std::string precision;
  std::string recompute = "none";  // --recompute-granularity

  // Registers every flag on `cmd` (the order of its --help); `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
};

}  // namespace hydraulis::tools
