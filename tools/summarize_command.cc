#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/json_text.h"

namespace hydraulis::tools {
namespace {

constexpr const char* kPlanFormat = "hydraulis.plan/1";

// Field checks for one plan line; every failure names the line and the field.
class PlanLine {
 public:
  PlanLine(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) Fail("", "expected a JSON object (a plan), got " + JsonForMessage(j_));
  }
  [[noreturn]] void Fail(const std::string& field, const std::string& problem) const {
    throw InvalidInput(where_ + ": " + (field.empty() ? "" : field + ": ") + problem);
  }
  const nlohmann::json& Get(const nlohmann::json& obj, const std::string& field,
                            const std::string& path) const {
    if (!obj.is_object() || !obj.contains(field)) Fail(path, "missing field");
    return obj.at(field);
  }
  double Number(const std::string& field, double min_value) const {
    const nlohmann::json& v = Get(j_, field, field);
    if (!v.is_number()) Fail(field, "expected a number, got " + JsonForMessage(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < min_value) {
      Fail(field, "expected a finite number >= " + fmt::format("{}", min_value) + ", got " +
                      JsonForMessage(v));
    }
    return x;
  }
  std::int64_t Count(const std::string& field) const {
    const nlohmann::json& v = Get(j_, field, field);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
      Fail(field, "expected an integer >= 0, got " + JsonForMessage(v));
    }
    return v.get<std::int64_t>();
  }
  std::string String(const nlohmann::json& obj, const std::string& field,
                     const std::string& path) const {
    const nlohmann::json& v = Get(obj, field, path);
    if (!v.is_string()) Fail(path, "expected a string, got " + JsonForMessage(v));
    return v.get<std::string>();
  }
  const nlohmann::json& json() const { return j_; }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

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
    const PlanLine p(j, where);
    if (p.String(j, "format", "format") != kPlanFormat) {
      p.Fail("format", "expected \"" + std::string(kPlanFormat) + "\", got " +
                           JsonForMessage(j.at("format")));
    }
    const double est = p.Number("estimated_step_ms", 0), lb = p.Number("lower_bound_ms", 0);
    if (lb > est * (1 + 1e-9)) {
      p.Fail("lower_bound_ms", "a lower bound above the plan's own estimated_step_ms (" +
                                   fmt::format("{} > {}", lb, est) + ")");
    }
    const double plan_ms = j.contains("planning_ms") ? p.Number("planning_ms", 0) : 0.0;
    const nlohmann::json& strategy = p.Get(j, "strategy", "strategy");
    const std::string name = p.String(strategy, "name", "strategy.name") + " " +
                             p.String(strategy, "description", "strategy.description");
    const std::int64_t docs = p.Count("num_documents"), tokens = p.Count("num_tokens");
    const nlohmann::json& pipelines = p.Get(j, "pipelines", "pipelines");
    if (!pipelines.is_array() || pipelines.empty()) {
      p.Fail("pipelines", "expected a non-empty array, got " + JsonForMessage(pipelines));
    }
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
