// The training driver's look-ahead: Lookahead (assign/lookahead.h, the mechanism the Python
// package's LookaheadPlanner also runs on) over the next steps of a BatchSampler, each with
// where the sampler stood after drawing it.
#pragma once

#include <memory>

#include "hydraulis/assign/lookahead.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/data/batch_sampler.h"

namespace hydraulis {

class PlanAhead {
 public:
  // One step's batch, its plan, and where the sampler stood after drawing it (what a
  // checkpoint taken after this step records).
  struct Step {
    SampledBatch batch;
    Plan plan;
    SamplerPosition position_after;
  };

  // Starts the thread: it draws `steps` batches from `sampler` (which it then owns until
  // this is destroyed; nothing else may use it) and plans them in order, at most `depth`
  // (>= 1) ahead of Next. `planner` and `sampler` must outlive this.
  PlanAhead(const Planner& planner, BatchSampler& sampler, int steps, int depth);
  // Stops the thread (a plan being made is finished first) and joins it.
  ~PlanAhead();
  PlanAhead(const PlanAhead&) = delete;
  PlanAhead& operator=(const PlanAhead&) = delete;

  // The next step, in the sampler's order; `waited_ms` is how long the call blocked. An
  // exception thrown while sampling or planning that step is rethrown here (and by every
  // later call). InternalError past the last of `steps`.
  Step Next(double& waited_ms);

 private:
  struct Drawn {  // a batch and the sampler's position after it
    SampledBatch batch;
    SamplerPosition position_after;
  };
  int drawn_ = 0;  // touched by the thread only
  std::unique_ptr<Lookahead<Drawn>> lookahead_;
};

}  // namespace hydraulis
