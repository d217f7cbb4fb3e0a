#include "truncation_warnings.h"

#include <fmt/core.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace hydraulis::tools {
namespace {

// The line both warnings share; `limit` says what the documents exceeded and what became of
// them.
void PrintTruncation(std::string_view prefix, std::int64_t documents, std::string_view limit,
                     std::int64_t lost) {
  fmt::print(stderr, "hydraulis: warning: {}{} document(s) longer than {}; {} tokens lost\n",
             prefix, documents, limit, lost);
}

}  // namespace

void WarnTruncation(const Plan& plan, int step) {
  if (plan.truncated.empty()) return;
  std::int64_t lost = 0;
  for (const auto& t : plan.truncated) lost += t.original - t.kept;
  PrintTruncation(
      step >= 0 ? fmt::format("step {}: ", step) : "",
      static_cast<std::int64_t>(plan.truncated.size()),
      fmt::format("every candidate's capacity truncated to {} tokens", plan.truncated.front().kept),
      lost);
}

void WarnTruncation(const SimResult& result) {
  std::int64_t truncated = 0;
  std::int64_t lost = 0;
  for (const StepResult& r : result.steps) {
    truncated += r.truncated_documents;
    lost += r.truncated_tokens;
  }
  if (truncated > 0) PrintTruncation("", truncated, "the system can hold were truncated", lost);
}

}  // namespace hydraulis::tools
