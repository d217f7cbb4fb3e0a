// Planning ahead: the next steps' batches drawn and planned on a background thread while the
// current step trains, so a step waits for its plan only when planning is slower than
// training. The one implementation of it: the runtime's PlanAhead (batches from a
// BatchSampler, job/plan_ahead.h) and the Python package's LookaheadPlanner (batches from
// any iterable) are this with their own sources.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <variant>

#include "hydraulis/assign/plan.h"

namespace hydraulis {

// Batch: what the source yields for one step (at least its document lengths).
template <typename Batch>
class Lookahead {
 public:
  // One step: its batch and the batch's plan.
  struct Step {
    Batch batch;
    Plan plan;
  };
  // The next batch, or nullopt when there is none; called on the thread, one call at a time.
  using NextBatch = std::function<std::optional<Batch>()>;
  // Plans one batch; called on the thread.
  using PlanOf = std::function<Plan(const Batch&)>;

  // Starts the thread: it draws batches from `next` and plans them in order, at most
  // `depth` (>= 1) ahead of Next. Whatever `next` and `plan` use must outlive this.
  Lookahead(NextBatch next, PlanOf plan, int depth)
      : next_(std::move(next)),
        plan_(std::move(plan)),
        depth_(static_cast<std::size_t>(depth < 1 ? 1 : depth)),
        thread_([this] { Run(); }) {}
  // Stop().
  ~Lookahead() { Stop(); }
  Lookahead(const Lookahead&) = delete;
  Lookahead& operator=(const Lookahead&) = delete;

  // The next step, in the source's order; nullopt once the source has ended (and after
  // Stop). `waited_ms` is how long the call blocked. An exception thrown while drawing or
  // planning that step is rethrown here, and by every later call.
  std::optional<Step> Next(double& waited_ms) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !ready_.empty() || ended_ || stop_; });
    waited_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (ready_.empty()) return std::nullopt;
    if (auto* error = std::get_if<std::exception_ptr>(&ready_.front())) {
      std::rethrow_exception(*error);  // left in the queue: later calls rethrow it too
    }
    Step step = std::move(std::get<Step>(ready_.front()));
    ready_.pop_front();
    lock.unlock();
    changed_.notify_all();
    return step;
  }

  // Steps planned and not yet taken by Next.
  std::size_t Ready() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return ready_.size();
  }

  // Stops the thread without drawing further (a batch being drawn or planned is finished
  // first) and joins it; steps already planned stay available to Next. Idempotent.
  void Stop() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || ready_.size() < depth_; });
        if (stop_) return;
      }
      std::optional<std::variant<Step, std::exception_ptr>> item;
      try {
        std::optional<Batch> batch = next_();
        if (batch) {
          Plan plan = plan_(*batch);
          item.emplace(Step{std::move(*batch), std::move(plan)});
        }
      } catch (...) {
        item.emplace(std::current_exception());
      }
      const bool last = !item || std::holds_alternative<std::exception_ptr>(*item);
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (item) ready_.push_back(std::move(*item));
        ended_ = last;
      }
      changed_.notify_all();
      if (last) return;  // the steps after an error are never asked for
    }
  }

  NextBatch next_;
  PlanOf plan_;
  const std::size_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::variant<Step, std::exception_ptr>> ready_;
  bool stop_ = false;
  bool ended_ = false;  // the source ended or failed: nothing more will be queued
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace hydraulis
