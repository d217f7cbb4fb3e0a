// Plans read back by `summarize`: ParsePlanLines.
#include "fuzz_input.h"
#include "hydraulis/assign/plan_lines.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hydraulis;
  fuzz::ExpectValidOrInvalidInput([&] {
    for (const PlanLine& plan : ParsePlanLines(fuzz::AsText(data, size), "plans.jsonl")) {
      fuzz::Require(plan.num_documents >= 0 && plan.num_tokens >= 0 &&
                        plan.lower_bound_ms <= plan.estimated_step_ms * (1 + 1e-9),
                    "counts >= 0 and lower bound <= estimate");
    }
  });
  return 0;
}
