#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/json_text.h"

namespace hydraulis::tools {
namespace {

double Num(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number()) {
    throw InvalidInput(where + ": missing number field '" + key + "'");
  }
  return j[key].get<double>();
}

int RunSummarize(const std::string& path) {
  std::istringstream in(ReadFileText(path));
  std::string line;
  int step = 0;
  double sum_est = 0, sum_lb = 0;
  std::vector<double> planning;
  fmt::print("{:>5} {:<24} {:>5} {:>8} {:>11} {:>11} {:>7} {:>9}\n", "step", "strategy", "docs",
             "tokens", "step_ms", "bound_ms", "gap", "plan_ms");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(step + 1);
    const nlohmann::json j = ParseJson(line, where);
    const double est = Num(j, "estimated_step_ms", where), lb = Num(j, "lower_bound_ms", where);
    const double plan_ms = j.contains("planning_ms") ? Num(j, "planning_ms", where) : 0.0;
    const std::string name = j.at("strategy").at("name").get<std::string>() + " " +
                             j.at("strategy").at("description").get<std::string>();
    fmt::print("{:>5} {:<24.24} {:>5} {:>8} {:>11.1f} {:>11.1f} {:>6.2f}% {:>9.2f}\n", step, name,
               j.at("num_documents").get<int>(), j.at("num_tokens").get<long>(), est, lb,
               100.0 * (est / lb - 1.0), plan_ms);
    sum_est += est;
    sum_lb += lb;
    planning.push_back(plan_ms);
    ++step;
  }
  if (step == 0) throw InvalidInput(path + ": no plans");
  std::sort(planning.begin(), planning.end());
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
