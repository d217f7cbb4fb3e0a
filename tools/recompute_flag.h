// --recompute-granularity on the planning commands (plan, simulate, propose): plan for a run
// under activation recomputation from a profile measured keeping every activation.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "hydraulis/spec/profile.h"

namespace hydraulis::tools {

struct RecomputeFlag {
  std::string mode;  // empty: the profile's own

  // Registers the flag on `cmd`; `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
  // `profile` for the flag's mode (RecomputedProfile), or as it is without the flag.
  // InvalidInput naming the flag on a bad value or a profile of another mode.
  Profile Apply(const Profile& profile, const std::string& profile_path) const;
};

}  // namespace hydraulis::tools
