// Runs independent jobs on a few threads. Callers keep their results deterministic by
// writing job k's result to slot k and combining the slots in order afterwards, so the
// outcome never depends on the thread count or on which thread ran which job.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace hydraulis {

// The thread count a `threads` option means: itself when >= 1, the hardware's threads
// when 0 (at least 1).
inline int ResolveThreads(int threads) {
  if (threads >= 1) return threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Calls job(k) for every k in [0, count) on up to `threads` threads (the calling thread
// is one of them; threads <= 1 or count <= 1 runs everything on it, in order). Jobs take
// the next index as they finish. The first exception a job throws is rethrown here after
// every thread has stopped; the jobs not yet started are skipped.
template <typename Job>
void ParallelFor(int count, int threads, const Job& job) {
  const int workers = std::min(threads, count);
  if (workers <= 1) {
    for (int k = 0; k < count; ++k) job(k);
    return;
  }
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int k = next++; k < count && !failed; k = next++) {
      try {
        job(k);
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  {
    std::vector<std::jthread> helpers;
    for (int w = 1; w < workers; ++w) helpers.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hydraulis
