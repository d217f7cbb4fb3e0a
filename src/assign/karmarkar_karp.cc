#include <algorithm>
#include <numeric>
#include <queue>

#include "baselines.h"
#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

// A partial k-way partition: subsets sorted by sum, largest first.
struct Partition {
  std::vector<double> sums;
  std::vector<std::vector<int>> sets;
  std::uint64_t id;  // creation order, for deterministic ties
  double Spread() const { return sums.front() - sums.back(); }
};

struct BySpread {
  bool operator()(const Partition* a, const Partition* b) const {
    if (a->Spread() != b->Spread()) return a->Spread() < b->Spread();
    return a->id > b->id;
  }
};

}  // namespace

Assignment AssignKarmarkarKarp(const AssignProblem& problem, const PackOptions& pack) {
  const std::size_t k = problem.pipelines.size();
  for (const auto& p : problem.pipelines) {
    if (!p.SameAs(problem.pipelines[0])) {
      throw InvalidInput("kk baseline needs a homogeneous strategy");
    }
  }
  std::vector<Partition> storage;
  storage.reserve(2 * problem.lengths.size() + 1);
  std::priority_queue<Partition*, std::vector<Partition*>, BySpread> heap;
  std::uint64_t next_id = 0;
  for (std::size_t d = 0; d < problem.lengths.size(); ++d) {
    Partition part;
    const double s = static_cast<double>(problem.lengths[d]);
    part.sums.assign(k, 0.0);
    part.sets.assign(k, {});
    part.sums[0] = s * s;
    part.sets[0].push_back(static_cast<int>(d));
    part.id = next_id++;
    storage.push_back(std::move(part));
    heap.push(&storage.back());
  }
  while (heap.size() > 1) {
    Partition* a = heap.top();
    heap.pop();
    Partition* b = heap.top();
    heap.pop();
    // Differencing: a's largest subset joins b's smallest, and so on.
    Partition merged;
    merged.sums.resize(k);
    merged.sets.resize(k);
    for (std::size_t i = 0; i < k; ++i) {
      merged.sums[i] = a->sums[i] + b->sums[k - 1 - i];
      merged.sets[i] = std::move(a->sets[i]);
      merged.sets[i].insert(merged.sets[i].end(), b->sets[k - 1 - i].begin(),
                            b->sets[k - 1 - i].end());
    }
    std::vector<std::size_t> idx(k);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](std::size_t x, std::size_t y) { return merged.sums[x] > merged.sums[y]; });
    Partition sorted;
    for (std::size_t i : idx) {
      sorted.sums.push_back(merged.sums[i]);
      sorted.sets.push_back(std::move(merged.sets[i]));
    }
    sorted.id = next_id++;
    storage.push_back(std::move(sorted));
    heap.push(&storage.back());
  }
  Assignment a;
  a.pipelines.assign(k, {});
  if (!heap.empty()) {
    Partition* root = heap.top();
    for (std::size_t p = 0; p < k; ++p) {
      std::sort(root->sets[p].begin(), root->sets[p].end());
      a.pipelines[p] =
          PackPipeline(problem, problem.pipelines[p], root->sets[p], pack).micro_batches;
    }
  }
  Evaluate(problem, a);
  return a;
}

}  // namespace hydraulis
