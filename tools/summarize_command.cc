#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/assign/plan.h"
#include "hydraulis/assign/plan_lines.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"

namespace hydraulis::tools {
namespace {

// A strategy name as the table shows it: as it is when every byte is printable, else
// quoted with its control and escape bytes written as \xHH, so a name from a file can
// never drive the user's terminal (clear the screen, move the cursor).
std::string ForTerminal(const std::string& name) {
  const std::string quoted = QuoteForMessage(name, name.size());
  return quoted == "'" + name + "'" ? name : quoted;
}

int RunSummarize(const std::string& path) {
  const std::vector<PlanLine> plans = ParsePlanLines(ReadFileText(path), path);
  double sum_est = 0, sum_lb = 0;
  std::vector<double> planning;
  fmt::print("{:>5} {:<24} {:>5} {:>8} {:>11} {:>11} {:>7} {:>9}\n", "step", "strategy", "docs",
             "tokens", "step_ms", "bound_ms", "gap", "plan_ms");
  for (std::size_t step = 0; step < plans.size(); ++step) {
    const PlanLine& p = plans[step];
    fmt::print("{:>5} {:<24.24} {:>5} {:>8} {:>11.1f} {:>11.1f} {:>6.2f}% {:>9.2f}\n", step,
               ForTerminal(p.strategy), p.num_documents, p.num_tokens, p.estimated_step_ms,
               p.lower_bound_ms,
               100.0 * RelativeGap(p.estimated_step_ms, p.lower_bound_ms).value_or(0.0),
               p.planning_ms);
    sum_est += p.estimated_step_ms;
    sum_lb += p.lower_bound_ms;
    planning.push_back(p.planning_ms);
  }
  std::sort(planning.begin(), planning.end());
  const auto steps = static_cast<double>(plans.size());
  fmt::print(
      "steps {}: mean step {:.1f} ms, mean lower bound {:.1f} ms (mean gap {:.2f}%), "
      "median planning {:.2f} ms\n",
      plans.size(), sum_est / steps, sum_lb / steps,
      100.0 * RelativeGap(sum_est, sum_lb).value_or(0.0), planning[planning.size() / 2]);
  return 0;
}

}  // namespace

Command AddSummarizeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("summarize", "Print a table of plans written by `plan --dataset`");
  auto path = std::make_shared<std::string>();
  cmd->add_option("plans", *path, "JSON-lines file of plans")->required();
  return [path] { return RunSummarize(*path); };
}

}  // namespace hydraulis::tools
