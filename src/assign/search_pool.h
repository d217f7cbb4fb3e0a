// The planner's candidate searches on worker threads, searched ahead of need: each
// candidate's two searches (plain and exchange-charged, two_stage.h) are separate jobs, taken
// by the workers in the order candidates are handed in, and a worker with nothing to do asks
// for the next candidate the planner would likely plan. The planner still takes results in its
// own order and decides from them alone, so its plan is that of one thread; only the work done
// ahead and never taken differs, and it is stopped when the pool closes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "hydraulis/assign/problem.h"
#include "hydraulis/assign/two_stage.h"
#include "hydraulis/base/idle_threads.h"

namespace hydraulis {

// Its idle workers (nothing queued, no candidate left to search ahead) are lent to the
// searches running (IdleThreads, TwoStageOptions::helpers).
class SearchPool : public IdleThreads {
 public:
  // Candidate i's problem and the options of its searches (stop_below_ms its full bound).
  struct Setup {
    AssignProblem problem;
    TwoStageOptions options;
  };
  using MakeSetup = std::function<Setup(int)>;
  // The next candidate to search ahead (-1 for none: then none is asked for again until
  // Resume), and its place in the order the answers were given (workers ask several at once
  // and may come back in another order; their searches are queued in this one).
  struct Ahead {
    int candidate = -1;
    std::int64_t place = 0;
  };
  using NextAhead = std::function<Ahead()>;

  SearchPool(int threads, MakeSetup setup, NextAhead next);
  ~SearchPool() override;  // stops the searches still running and joins the workers
  SearchPool(const SearchPool&) = delete;
  SearchPool& operator=(const SearchPool&) = delete;

  // AssignTwoStage's result for candidate i (its searches queued first if not yet begun);
  // waits for it. Rethrows what a search of i threw.
  Assignment Take(int i);
  // Asks NextAhead again after it answered -1 (the planner's order changed).
  void Resume();

  bool Post(Task& task) override;
  bool Reclaim(Task& task) override;

 private:
  struct Entry {
    Setup setup;
    bool has_charged = false;
    int pending = 0;  // jobs not finished
    Assignment plain;
    std::optional<Assignment> charged;  // where the charged search ran and is kept
    bool plain_done = false;
    std::atomic<bool> stop{false};
    std::exception_ptr error;
  };
  struct Job {
    int candidate;
    bool charged;
    std::int64_t place;  // queued in ascending order; Take's come first
  };

  // Makes candidate i's entry and queues its jobs at `place`; the caller holds mutex_.
  Entry& Add(int i, Setup setup, std::int64_t place);
  void Work();
  void Run(const Job& job, std::unique_lock<std::mutex>& lock);

  MakeSetup setup_;
  NextAhead next_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  std::map<int, std::unique_ptr<Entry>> entries_;
  bool ahead_done_ = false;            // next_ answered -1 ...
  std::int64_t ahead_generation_ = 0;  // ... since the last Resume
  bool closing_ = false;
  int idle_ = 0;                  // workers waiting with nothing to do
  std::deque<Task*> help_queue_;  // posted, not yet started
  std::vector<std::jthread> workers_;
};

}  // namespace hydraulis
