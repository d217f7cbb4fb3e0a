// The table `profile` prints on stdout once the profile is written: each scheme's fitted
// cost model, how well it fits its samples, and its capacity.
#pragma once

#include "hydraulis/runtime/job/profile_run.h"

namespace hydraulis::tools {

// A header line, then a line per profiled scheme of `run` (rank 0's).
void PrintFitTable(const ProfileRun& run);

}  // namespace hydraulis::tools
