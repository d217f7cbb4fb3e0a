// Plans one batch with the installed library: plan_one_batch PROFILE CANDIDATES LENGTH...
// Prints the chosen strategy's step time and the lower bound.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "hydraulis/assign/planner.h"
#include "hydraulis/spec/spec_io.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s PROFILE CANDIDATES LENGTH...\n", argv[0]);
    return 2;
  }
  try {
    const hydraulis::Profile profile = hydraulis::LoadProfile(argv[1]);
    const hydraulis::CandidateSet candidates = hydraulis::LoadCandidates(argv[2], profile);
    std::vector<std::int64_t> lengths;
    for (int i = 3; i < argc; ++i) lengths.push_back(std::stoll(argv[i]));
    const hydraulis::Planner planner(profile, candidates, hydraulis::PlannerOptions{});
    const hydraulis::Plan plan = planner.PlanBatch(lengths);
    std::printf("strategy %d step_ms %.3f bound_ms %.3f\n", plan.strategy_index,
                plan.estimated_step_ms, plan.lower_bound_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_one_batch: %s\n", e.what());
    return 1;
  }
  return 0;
}
