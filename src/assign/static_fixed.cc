#include <algorithm>
#include <numeric>

#include "baselines.h"
#include "hydraulis/base/error.h"

namespace hydraulis {

Assignment AssignStaticFixed(const AssignProblem& problem, std::int64_t bin_tokens) {
  for (const auto& p : problem.pipelines) {
    if (p.capacity_tokens < bin_tokens) {
      throw InvalidInput("static-fixed: bin size " + std::to_string(bin_tokens) +
                         " exceeds a pipeline's capacity " + std::to_string(p.capacity_tokens));
    }
  }
  std::vector<int> all(problem.lengths.size());
  std::iota(all.begin(), all.end(), 0);
  MicroBatches bins = MinCountPack(problem.lengths, all, bin_tokens);
  Assignment a;
  a.pipelines.assign(problem.pipelines.size(), {});
  for (std::size_t b = 0; b < bins.size(); ++b) {
    std::sort(bins[b].begin(), bins[b].end());
    a.pipelines[b % problem.pipelines.size()].push_back(std::move(bins[b]));
  }
  Evaluate(problem, a);
  return a;
}

}  // namespace hydraulis
