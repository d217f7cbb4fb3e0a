#include "recompute_flag.h"

#include "hydraulis/base/error.h"
#include "hydraulis/cost/recomputed_profile.h"

namespace hydraulis::tools {

void RecomputeFlag::AddTo(CLI::App* cmd) {
  cmd->add_option("--recompute-granularity", mode,
                  "plan for a run under activation recomputation: none, selective or full; a "
                  "profile measured without it gets the mode's activation bytes and the forward "
                  "run again (docs/runtime.md); default: the profile's own mode");
}

Profile RecomputeFlag::Apply(const Profile& profile, const std::string& profile_path) const {
  if (mode.empty()) return profile;
  const Recompute target = ParseRecompute(mode, "--recompute-granularity");
  try {
    return RecomputedProfile(profile, target);
  } catch (const InvalidInput& e) {
    throw InvalidInput("--recompute-granularity " + mode + ": " + profile_path + ": " + e.what());
  }
}

}  // namespace hydraulis::tools
