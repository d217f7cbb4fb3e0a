// Turns a sampled global batch into a step's work with one of the compared systems.
#pragma once

#include <cstdint>
#include <span>

#include "hydraulis/assign/planner.h"
#include "hydraulis/sim/step_work.h"
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
  // micro-batch. Deterministic except for the published planner (CBC time limits).
  StepWork Plan(std::span<const std::int64_t> lengths) const;

  System system() const { return system_; }
  // The planner behind it (capacities, the candidate set, the options it runs with).
  const Planner& planner() const { return planner_; }

 private:
  StepWork PlanPadding(std::span<const std::int64_t> lengths) const;

  System system_;
  Planner planner_;
};

}  // namespace hydraulis
