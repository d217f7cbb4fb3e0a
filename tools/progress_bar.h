// A one-line progress bar on stderr for long work (simulate's steps, propose's proposal and
// its plan-based selection), as users of long-running CLIs expect.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

namespace hydraulis::tools {

// Redrawn with \r, only when stderr is a terminal (a log file would fill with redraws) and
// only once the work has taken a second, so short runs print nothing. Update may be called
// from several threads. The line is erased when the bar is destroyed.
class ProgressBar {
 public:
  // `unit` names what is counted ("steps", "batches").
  explicit ProgressBar(std::string unit);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` of `total` are finished.
  void Update(long long done, long long total);

 private:
  using Clock = std::chrono::steady_clock;
  std::string unit_;
  bool enabled_;
  double last_draw_s_ = 0;
  bool shown_ = false;
  Clock::time_point start_;
  std::mutex mutex_;
};

}  // namespace hydraulis::tools
