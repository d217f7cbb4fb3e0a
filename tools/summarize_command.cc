#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/json_text.h"
#include "hydraulis/spec/json_reader.h"

namespace hydraulis::tools {
namespace {

constexpr const char* kPlanFormat = "hydraulis.plan/1";

int RunSummarize(const std::string& path) {
  std::istringstream in(ReadFileText(path));
  std::string line;
  int step = 0;
  double sum_est = 0, sum_lb = 0;
  std::vector<double> planning;
  // The table is printed only once every line has been checked: a bad line prints nothing.
  std::string out =
      fmt::format("{:>5} {:<24} {:>5} {:>8} {:>11} {:>11} {:>7} {:>9}\n", "step", "strategy",
                  "docs", "tokens", "step_ms", "bound_ms", "gap", "plan_ms");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(step + 1);
    const nlohmann::json j = ParseJson(line, where);
    if (!j.is_object()) {
      throw InvalidInput(where + ": expected a JSON object (a plan), got " + JsonForMessage(j));
    }
    // Keys this reader does not know are ignored (docs/plan-format.md): no RejectUnknown.
    JsonObjectReader p(j, where, "");
    if (p.String("format") != kPlanFormat) {
      p.Fail("format", "expected \"" + std::string(kPlanFormat) + "\", got " +
                           JsonForMessage(j.at("format")));
    }
    const double est = p.Number("estimated_step_ms", 0), lb = p.Number("lower_bound_ms", 0);
    if (lb > est * (1 + 1e-9)) {
      p.Fail("lower_bound_ms", "a lower bound above the plan's own estimated_step_ms (" +
                                   fmt::format("{} > {}", lb, est) + ")");
    }
    const double plan_ms = p.Has("planning_ms") ? p.Number("planning_ms", 0) : 0.0;
    JsonObjectReader strategy = p.Object("strategy");
    const std::string name = strategy.String("name") + " " + strategy.String("description");
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    const std::int64_t docs = p.Int("num_documents", 0, kMax);
    const std::int64_t tokens = p.Int("num_tokens", 0, kMax);
    if (p.Array("pipelines").empty()) p.Fail("pipelines", "must list at least one pipeline");
    out +=
        fmt::format("{:>5} {:<24.24} {:>5} {:>8} {:>11.1f} {:>11.1f} {:>6.2f}% {:>9.2f}\n", step,
                    name, docs, tokens, est, lb, lb > 0 ? 100.0 * (est / lb - 1.0) : 0.0, plan_ms);
    sum_est += est;
    sum_lb += lb;
    planning.push_back(plan_ms);
    ++step;
  }
  if (step == 0) throw InvalidInput(path + ": no plans");
  std::sort(planning.begin(), planning.end());
  fmt::print("{}", out);
  fmt::print(
      "steps {}: mean step {:.1f} ms, mean lower bound {:.1f} ms (mean gap {:.2f}%), "
      "median planning {:.2f} ms\n",
      step, sum_est / step, sum_lb / step, 100.0 * (sum_est / sum_lb - 1.0),
      planning[planning.size() / 2]);
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
