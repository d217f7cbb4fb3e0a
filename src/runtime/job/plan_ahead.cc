#include "hydraulis/runtime/job/plan_ahead.h"

#include <algorithm>

#include "hydraulis/base/error.h"

namespace hydraulis {

PlannerTimeline::PlannerTimeline(std::shared_ptr<const Planner> first, int first_step, int lag,
                                 int version)
    : lag_(lag), published_(first_step - 1) {
  entries_.push_back({first_step, std::move(first), version});
}

void PlannerTimeline::Publish(int step, std::shared_ptr<const Planner> planner, int version) {
  {
    const std::lock_guard lock(mutex_);
    if (step != published_ + 1) {
      throw InternalError("PlannerTimeline: step " + std::to_string(step) +
                          " published after step " + std::to_string(published_));
    }
    published_ = step;
    if (planner) entries_.push_back({step + 1 + lag_, std::move(planner), version});
  }
  changed_.notify_all();
}

std::pair<std::shared_ptr<const Planner>, int> PlannerTimeline::ForStep(int step) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return cancelled_ || published_ >= step - 1 - lag_; });
  if (cancelled_) throw Error("planning stopped: the training job is ending");
  // The newest entry that starts at or before `step`.
  const Entry* chosen = &entries_.front();
  for (const Entry& e : entries_) {
    if (e.from_step <= step) chosen = &e;
  }
  return {chosen->planner, chosen->version};
}

void PlannerTimeline::Cancel() {
  {
    const std::lock_guard lock(mutex_);
    cancelled_ = true;
  }
  changed_.notify_all();
}

PlanAhead::PlanAhead(PlannerTimeline& timeline, BatchSampler& sampler, int first_step, int steps,
                     int depth)
    : timeline_(timeline), next_step_(first_step) {
  lookahead_ = std::make_unique<Lookahead<Drawn>>(
      [this, &sampler, steps]() -> std::optional<Drawn> {
        if (next_step_ >= steps) return std::nullopt;
        Drawn d;
        d.step = next_step_++;
        d.batch = sampler.Next();
        d.position_after = sampler.position();
        return d;
      },
      [this](const Drawn& d) {
        return timeline_.ForStep(d.step).first->PlanBatch(d.batch.lengths);
      },
      depth);
}

PlanAhead::~PlanAhead() {
  timeline_.Cancel();
  lookahead_.reset();
}

PlanAhead::Step PlanAhead::Next(double& waited_ms) {
  std::optional<Lookahead<Drawn>::Step> next = lookahead_->Next(waited_ms);
  if (!next) throw InternalError("PlanAhead::Next: past the last step");
  // The fit that planned it: the timeline's answer for a step never changes once that step
  // could be planned (later fits start after the look-ahead), and it no longer waits.
  const int version = timeline_.ForStep(next->batch.step).second;
  return Step{std::move(next->batch.batch), std::move(next->plan), version,
              next->batch.position_after};
}

}  // namespace hydraulis
