// The least makespan of a few documents over a few pipelines, by branch and bound: what the
// lower bound (FewPipelinesBound) needs for the longest documents of a batch when only a
// few pipelines can hold them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

namespace hydraulis {

struct ExactSplitResult {
  bool finished = false;  // false: the node limit was reached, nothing is proven
  double makespan = std::numeric_limits<double>::infinity();
  std::vector<int> pipeline_of;  // per document, its pipeline in the best split
};

// Documents 0..n-1 onto pipelines 0..m-1, documents visited in `order`. `add(load, d, p)`
// returns pipeline p's time after it takes document d on top of `load` (its time so far,
// 0 when empty), +infinity where d may not run on p; it must not decrease with more
// documents, which the pruning relies on. Pipelines of equal kind[p] are interchangeable:
// a document is offered only the first of those with equal time. At most max_nodes nodes.
template <typename Add>
ExactSplitResult ExactSplit(std::size_t n, const std::vector<int>& kind,
                            const std::vector<std::size_t>& order, const Add& add, long max_nodes) {
  const std::size_t m = kind.size();
  std::vector<double> load(m, 0.0);
  std::vector<int> current(n, -1);
  ExactSplitResult result;
  long nodes = 0;
  std::function<void(std::size_t, double)> visit = [&](std::size_t k, double makespan) {
    if (++nodes > max_nodes || makespan >= result.makespan) return;
    if (k == n) {
      result.makespan = makespan;
      result.pipeline_of = current;
      return;
    }
    const std::size_t d = order[k];
    for (std::size_t p = 0; p < m; ++p) {
      bool twin = false;
      for (std::size_t q = 0; q < p && !twin; ++q) twin = kind[q] == kind[p] && load[q] == load[p];
      if (twin) continue;
      const double after = add(load[p], d, p);
      if (after == std::numeric_limits<double>::infinity()) continue;
      const double before = load[p];
      load[p] = after;
      current[d] = static_cast<int>(p);
      visit(k + 1, std::max(makespan, after));
      load[p] = before;
      current[d] = -1;
    }
  };
  visit(0, 0.0);
  result.finished = nodes <= max_nodes;
  return result;
}

}  // namespace hydraulis
