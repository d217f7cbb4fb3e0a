// Threads a computation may borrow while they would otherwise wait. A task posted runs on
// one of them if one is idle now; the poster takes it back later, before it starts (then
// runs it itself or drops it) or after it ran. Callers keep results deterministic by
// making the task a pure function whose result they use or drop as they would have
// without it: whether a thread was idle decides only where it ran.
#pragma once

#include <exception>
#include <functional>

namespace hydraulis {

class IdleThreads {
 public:
  struct Task {
    enum class State { kQueued, kRunning, kDone };
    std::function<void()> run;
    State state = State::kQueued;  // kept by the implementation
    std::exception_ptr error;      // what run threw, rethrown by Reclaim
  };

  virtual ~IdleThreads() = default;
  // Queues `task` for an idle thread and returns true, or returns false when no thread is
  // idle now (the task is then not queued). The task must outlive its Reclaim.
  virtual bool Post(Task& task) = 0;
  // For a task Post queued: false if no thread had started it (it is taken back and will
  // not run there); else waits until it has run and returns true, rethrowing what it threw.
  virtual bool Reclaim(Task& task) = 0;
};

}  // namespace hydraulis
