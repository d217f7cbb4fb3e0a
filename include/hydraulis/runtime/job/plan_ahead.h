// The training driver's look-ahead: the next steps' global batches sampled and planned on a
// background thread while the current step trains (the mechanism of the Python package's
// LookaheadPlanner, docs/python.md), so a step waits for its plan only when planning is
// slower than training.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <variant>

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
  void Run();

  const Planner& planner_;
  BatchSampler& sampler_;
  const int steps_;
  const std::size_t depth_;
  int taken_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::variant<Step, std::exception_ptr>> ready_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace hydraulis
