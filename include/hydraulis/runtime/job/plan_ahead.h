// The training driver's look-ahead: Lookahead (assign/lookahead.h, the mechanism the Python
// package's LookaheadPlanner also runs on) over the next steps of a BatchSampler, each with
// where the sampler stood after drawing it, planned by the planner a PlannerTimeline gives
// its step.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "hydraulis/assign/lookahead.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/data/batch_sampler.h"

namespace hydraulis {

// The planners of a run's steps as the calibration adopts new fits, so that every rank
// plans every step on the same fit whatever its threads' timing: step u is planned by the
// newest planner published after a step of at most u - 1 - lag, and ForStep waits until
// that step is published. With lag the look-ahead's depth the wait never happens in a run
// that publishes each step before taking the next one's plan.
class PlannerTimeline {
 public:
  // `first` (of fit `version`): the planner of the steps from `first_step` on until another
  // is published.
  PlannerTimeline(std::shared_ptr<const Planner> first, int first_step, int lag, int version = 0);

  // Step `step` is done: `planner` (with its fit version), when not null, plans the steps
  // after step + lag. Steps are published in order.
  void Publish(int step, std::shared_ptr<const Planner> planner = nullptr, int version = 0);

  // The planner of step `step` and its fit version; blocks until it is known. Throws
  // Error once Cancel was called.
  std::pair<std::shared_ptr<const Planner>, int> ForStep(int step);

  // Wakes and fails every ForStep (the job is ending).
  void Cancel();

 private:
  struct Entry {
    int from_step;  // plans steps >= from_step
    std::shared_ptr<const Planner> planner;
    int version;
  };
  const int lag_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int published_;  // the last step published
  bool cancelled_ = false;
  std::vector<Entry> entries_;  // by from_step
};

class PlanAhead {
 public:
  // One step's batch, its plan, the fit version that planned it, and where the sampler
  // stood after drawing it (what a checkpoint taken after this step records).
  struct Step {
    SampledBatch batch;
    Plan plan;
    int fit_version = 0;
    SamplerPosition position_after;
  };

  // Starts the thread: it draws the batches of steps [first_step, steps) from `sampler`
  // (which it then owns until this is destroyed; nothing else may use it) and plans them in
  // order on `timeline`'s planner of each, at most `depth` (>= 1) ahead of Next. `sampler`
  // and `timeline` must outlive this.
  PlanAhead(PlannerTimeline& timeline, BatchSampler& sampler, int first_step, int steps, int depth);
  // Cancels the timeline's waits, stops the thread (a plan being made is finished first)
  // and joins it.
  ~PlanAhead();
  PlanAhead(const PlanAhead&) = delete;
  PlanAhead& operator=(const PlanAhead&) = delete;

  // The next step, in the sampler's order; `waited_ms` is how long the call blocked. An
  // exception thrown while sampling or planning that step is rethrown here (and by every
  // later call). InternalError past the last of `steps`.
  Step Next(double& waited_ms);

 private:
  struct Drawn {  // a batch, its step and the sampler's position after it
    SampledBatch batch;
    int step = 0;
    SamplerPosition position_after;
  };
  PlannerTimeline& timeline_;
  int next_step_;  // touched by the thread only
  std::unique_ptr<Lookahead<Drawn>> lookahead_;
};

}  // namespace hydraulis
