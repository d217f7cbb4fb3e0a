// `propose --select-batches`: which proposed strategies to keep, chosen by planning sampled
// batches with all of them (assign/candidate_selection.h).
#pragma once

#include <cstdint>
#include <span>

#include "hydraulis/propose/propose.h"
#include "hydraulis/spec/profile.h"
#include "propose_args.h"

namespace hydraulis::tools {

// Plans a.select_batches sampled batches with every strategy of `p` and keeps the fallback,
// the longest bin's strategy and the a.max_strategies - 1 others that most lower those
// batches' planned steps. Rewrites `p` to the kept strategies and prints (unless --quiet)
// what the choice costs on those batches. Does nothing when `p` has few enough strategies.
void KeepByPlans(const Profile& profile, std::span<const std::int64_t> lengths,
                 const ProposeArgs& a, Proposal& p);

}  // namespace hydraulis::tools
