// Simulates a training run: samples each global batch, plans it with the chosen system,
// and times the step (step_timer.h). Deterministic for every system but published.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "hydraulis/sim/sim_options.h"
#include "hydraulis/sim/step_timer.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

struct SimResult {
  SimOptions options;
  std::vector<StepResult> steps;
  double total_time_ms = 0;
  std::int64_t total_tokens = 0;
  double tokens_per_second = 0;  // total_tokens / total time
  double mean_step_ms = 0;
  double mean_bubble_share = 0;  // mean over steps
  double planning_wall_ms = 0;   // wall-clock spent planning; not part of the summary
};

// Called after each step with (steps done, steps in total).
using SimProgress = std::function<void(int, int)>;

// Runs options.steps steps on batches sampled from `dataset` (document lengths >= 1).
// Precondition: `candidates` was validated against `profile`. InvalidInput on invalid
// options (ValidateSimOptions) or when the system cannot run on the candidates.
SimResult Simulate(const Profile& profile, const CandidateSet& candidates,
                   std::span<const std::int64_t> dataset, const SimOptions& options,
                   const SimProgress& progress = {});

}  // namespace hydraulis
