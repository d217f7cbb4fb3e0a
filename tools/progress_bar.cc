#include "progress_bar.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

namespace hydraulis::tools {
namespace {

constexpr double kDelaySeconds = 1.0;
constexpr double kRedrawSeconds = 0.1;  // at most ten redraws a second
constexpr long long kWidth = 30;

}  // namespace

ProgressBar::ProgressBar(std::string unit)
    : unit_(std::move(unit)), enabled_(isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}

ProgressBar::~ProgressBar() {
  if (shown_) fmt::print(stderr, "\r\033[K");
}

void ProgressBar::Update(long long done, long long total) {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count();
  if (elapsed_s < kDelaySeconds) return;
  // Always the last redraw, so the bar ends full.
  if (done < total && elapsed_s - last_draw_s_ < kRedrawSeconds) return;
  last_draw_s_ = elapsed_s;
  const long long filled = total > 0 ? done * kWidth / total : kWidth;
  fmt::print(stderr, "\r[{}{}] {}/{} {}  {:.1f} s", std::string(filled, '#'),
             std::string(kWidth - filled, '.'), done, total, unit_, elapsed_s);
  std::fflush(stderr);
  shown_ = true;
}

}  // namespace hydraulis::tools
