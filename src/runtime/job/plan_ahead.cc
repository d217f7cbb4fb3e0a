#include "hydraulis/runtime/job/plan_ahead.h"

#include <chrono>

#include "hydraulis/base/error.h"

namespace hydraulis {

PlanAhead::PlanAhead(const Planner& planner, BatchSampler& sampler, int steps, int depth)
    : planner_(planner),
      sampler_(sampler),
      steps_(steps),
      depth_(static_cast<std::size_t>(depth < 1 ? 1 : depth)),
      thread_([this] { Run(); }) {}

PlanAhead::~PlanAhead() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void PlanAhead::Run() {
  for (int i = 0; i < steps_; ++i) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stop_ || ready_.size() < depth_; });
      if (stop_) return;
    }
    std::variant<Step, std::exception_ptr> item;
    try {
      Step step;
      step.batch = sampler_.Next();
      step.plan = planner_.PlanBatch(step.batch.lengths);
      step.position_after = sampler_.position();
      item = std::move(step);
    } catch (...) {
      item = std::current_exception();
    }
    const bool failed = std::holds_alternative<std::exception_ptr>(item);
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(std::move(item));
    }
    changed_.notify_all();
    if (failed) return;  // the steps after it are never asked for
  }
}

PlanAhead::Step PlanAhead::Next(double& waited_ms) {
  if (taken_ >= steps_) throw InternalError("PlanAhead::Next: past the last step");
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !ready_.empty(); });
  waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (auto* error = std::get_if<std::exception_ptr>(&ready_.front())) {
    std::rethrow_exception(*error);  // left in the queue: later calls rethrow it too
  }
  Step step = std::move(std::get<Step>(ready_.front()));
  ready_.pop_front();
  ++taken_;
  lock.unlock();
  changed_.notify_all();
  return step;
}

}  // namespace hydraulis
