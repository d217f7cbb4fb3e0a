#include "replay_report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace hydraulis::tools {
namespace {

double RelativeError(const ReplayedStep& s) {
  return std::abs(s.predicted_ms - s.measured_ms) / s.measured_ms;
}

}  // namespace

ReplaySummary Summarize(const CalibrationReplay& replay) {
  ReplaySummary out;
  const std::size_t n = replay.steps.size(), tail = std::min<std::size_t>(10, n);
  out.tail_steps = static_cast<int>(tail);
  for (std::size_t i = n - tail; i < n; ++i) {
    out.last_steps_error += RelativeError(replay.steps[i]) / static_cast<double>(tail);
  }
  for (std::size_t i = n; i-- > 0;) {
    if (RelativeError(replay.steps[i]) > 0.10) break;
    out.settled_at = replay.steps[i].step;
  }
  return out;
}

std::string ReplayJson(const CalibrationReplay& replay, const ReplaySummary& summary) {
  nlohmann::ordered_json j;
  j["steps"] = nlohmann::ordered_json::array();
  for (const ReplayedStep& s : replay.steps) {
    nlohmann::ordered_json step = {{"step", s.step},
                                   {"measured_ms", s.measured_ms},
                                   {"predicted_ms", s.predicted_ms},
                                   {"fit", s.fit_version},
                                   {"adopted", s.adopted}};
    if (!s.rejected.empty()) step["rejected"] = s.rejected;
    j["steps"].push_back(step);
  }
  j["last_steps_error"] = summary.last_steps_error;
  j["within_10_percent_from_step"] =
      summary.settled_at ? nlohmann::ordered_json(*summary.settled_at) : nlohmann::ordered_json();
  j["fit"] = replay.fit.version;
  return j.dump(2) + "\n";
}

void PrintReplay(const CalibrationReplay& replay, const ReplaySummary& summary) {
  fmt::print("{:>6} {:>12} {:>12} {:>8} {:>4}\n", "step", "measured ms", "predicted ms", "error",
             "fit");
  for (const ReplayedStep& s : replay.steps) {
    fmt::print("{:>6} {:>12.1f} {:>12.1f} {:>7.1f}% {:>4}{}{}\n", s.step, s.measured_ms,
               s.predicted_ms, 100 * RelativeError(s), s.fit_version,
               s.adopted ? "  refit adopted" : "",
               s.rejected.empty() ? "" : "  not used: " + s.rejected);
  }
  fmt::print(
      "{} steps; mean error of the last {}: {:.1f}%; {}; fit in use at the end: version {}\n",
      replay.steps.size(), summary.tail_steps, 100 * summary.last_steps_error,
      summary.settled_at ? fmt::format("within 10% from step {}", *summary.settled_at)
                         : std::string("not within 10% on the last step"),
      replay.fit.version);
}

}  // namespace hydraulis::tools
