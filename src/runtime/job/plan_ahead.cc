#include "hydraulis/runtime/job/plan_ahead.h"

#include "hydraulis/base/error.h"

namespace hydraulis {

PlanAhead::PlanAhead(const Planner& planner, BatchSampler& sampler, int steps, int depth)
    : lookahead_(std::make_unique<Lookahead<Drawn>>(
          [this, &sampler, steps]() -> std::optional<Drawn> {
            if (drawn_ >= steps) return std::nullopt;
            ++drawn_;
            Drawn d;
            d.batch = sampler.Next();
            d.position_after = sampler.position();
            return d;
          },
          [&planner](const Drawn& d) { return planner.PlanBatch(d.batch.lengths); }, depth)) {}

PlanAhead::~PlanAhead() = default;

PlanAhead::Step PlanAhead::Next(double& waited_ms) {
  std::optional<Lookahead<Drawn>::Step> next = lookahead_->Next(waited_ms);
  if (!next) throw InternalError("PlanAhead::Next: past the last step");
  return Step{std::move(next->batch.batch), std::move(next->plan), next->batch.position_after};
}

}  // namespace hydraulis
