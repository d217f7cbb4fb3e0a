// Plans a sampled global batch with one of the compared systems, as the planner's `Plan`
// (the one plan type from planner to executor; the step timer reads it as it is).
#pragma once

#include <cstdint>
#include <span>

#include "hydraulis/assign/planner.h"
#include "hydraulis/sim/system.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

class StepPlanner {
 public:
  // `options` supplies the context length, seed and schedule; the algorithm and
  // only_strategy are set from `system`. Precondition: `candidates` was validated against
  // `profile`. InvalidInput when a static system finds no homogeneous candidate.
  StepPlanner(const Profile& profile, const CandidateSet& candidates, System system,
              const PlannerOptions& options);

  // Plans one batch (lengths >= 1). Every document index appears in exactly one
  // micro-batch. Deterministic except for the published planner (CBC time limits). The
  // padding system's plan has one document per micro-batch and estimates every
  // micro-batch at padded_tokens().
  hydraulis::Plan Plan(std::span<const std::int64_t> lengths) const;

  // The tokens every micro-batch is padded to: the context length capped at the static
  // candidate's capacity for the padding system, 0 (no padding) for the others.
  std::int64_t padded_tokens() const { return padded_tokens_; }

  System system() const { return system_; }
  // The planner behind it (capacities, the candidate set, the options it runs with).
  const Planner& planner() const { return planner_; }

 private:
  hydraulis::Plan PlanPadding(std::span<const std::int64_t> lengths) const;

  System system_;
  Planner planner_;
  std::int64_t padded_tokens_ = 0;
};

}  // namespace hydraulis
