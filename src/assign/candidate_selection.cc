#include "hydraulis/assign/candidate_selection.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/base/parallel_for.h"
#include "hydraulis/base/tolerance.h"

namespace hydraulis {
namespace {

// A selection's total: first the batches nothing kept holds, then the summed values.
struct Total {
  std::size_t unheld = 0;
  double ms = 0;
  bool operator<(const Total& o) const {
    return unheld != o.unheld ? unheld < o.unheld : ms < o.ms;
  }
  void Add(double v) {
    if (v < kInf) {
      ms += v;
    } else {
      ++unheld;
    }
  }
};

}  // namespace

std::vector<int> GreedyCoverSelection(const std::vector<std::vector<double>>& ms,
                                      std::span<const int> always, int more) {
  if (more < 0) throw InvalidInput("candidate selection: more must be >= 0");
  const std::size_t batches = ms.empty() ? 0 : ms.front().size();
  for (const std::vector<double>& row : ms) {
    if (row.size() != batches) {
      throw InvalidInput("candidate selection: every candidate needs one value per batch");
    }
  }
  std::vector<double> best(batches, kInf);
  std::vector<bool> taken(ms.size(), false);
  for (int k : always) {
    if (k < 0 || k >= static_cast<int>(ms.size())) {
      throw InvalidInput("candidate selection: no candidate " + std::to_string(k));
    }
    taken[static_cast<std::size_t>(k)] = true;
    const std::vector<double>& row = ms[static_cast<std::size_t>(k)];
    for (std::size_t b = 0; b < batches; ++b) best[b] = std::min(best[b], row[b]);
  }
  Total current;
  for (double v : best) current.Add(v);
  std::vector<int> added;
  for (int round = 0; round < more; ++round) {
    int pick = -1;
    Total pick_total = current;
    for (std::size_t s = 0; s < ms.size(); ++s) {
      if (taken[s]) continue;
      Total t;
      for (std::size_t b = 0; b < batches; ++b) t.Add(std::min(best[b], ms[s][b]));
      if (t < pick_total) {
        pick = static_cast<int>(s);
        pick_total = t;
      }
    }
    if (pick < 0) break;
    taken[static_cast<std::size_t>(pick)] = true;
    added.push_back(pick);
    current = pick_total;
    const std::vector<double>& row = ms[static_cast<std::size_t>(pick)];
    for (std::size_t b = 0; b < batches; ++b) best[b] = std::min(best[b], row[b]);
  }
  return added;
}

CandidateSet KeptCandidates(const CandidateSet& candidates, std::span<const int> kept) {
  CandidateSet out = candidates;
  out.strategies.clear();
  for (int i : kept) {
    if (i < 0 || i >= static_cast<int>(candidates.strategies.size())) {
      throw InvalidInput("candidate selection: no candidate " + std::to_string(i));
    }
    out.strategies.push_back(candidates.strategies[static_cast<std::size_t>(i)]);
  }
  return out;
}

CandidateSelection SelectCandidatesByPlans(
    const Profile& profile, const CandidateSet& candidates,
    std::span<const std::vector<std::int64_t>> batches, std::span<const int> always, int more,
    const PlannerOptions& options, const std::function<void(int done, int total)>& progress) {
  if (options.algorithm != Algorithm::kOurs || options.only_strategy != -1) {
    throw InvalidInput("candidate selection: plans with ours over every candidate");
  }
  const std::size_t count = candidates.strategies.size();
  // The batches are independent: each planned on one thread, several at once (plans are
  // the same for every thread count, and each job writes only its batch's column), which
  // keeps the threads busier than one batch's candidates do.
  PlannerOptions one_thread = options;
  one_thread.threads = 1;
  one_thread.order_ties_by_room = false;  // see PlannerOptions::order_ties_by_room
  const Planner planner(profile, candidates, one_thread);
  std::vector<std::vector<double>> ms(count, std::vector<double>(batches.size(), kInf));
  std::mutex progress_mutex;
  int planned = 0;
  ParallelFor(static_cast<int>(batches.size()), ResolveThreads(options.threads), [&](int job) {
    const auto b = static_cast<std::size_t>(job);
    const Plan plan = planner.PlanBatch(batches[b]);
    for (const CandidateReport& c : plan.candidates) {
      double v = kInf;
      if (c.status == CandidateStatus::kPlanned) {
        v = c.estimated_step_ms;
      } else if (c.status == CandidateStatus::kPruned) {
        // Pruned within the tolerance, its bound may sit below the best plan; it is credited
        // with no gain over that plan, which it could beat by at most the tolerance.
        v = std::max(c.lower_bound_ms, plan.estimated_step_ms);
      }
      if (v < kInf && static_cast<std::size_t>(c.index) < options.strategy_overhead_ms.size()) {
        v += options.strategy_overhead_ms[static_cast<std::size_t>(c.index)];
      }
      ms[static_cast<std::size_t>(c.index)][b] = v;
    }
    if (progress) {
      const std::lock_guard<std::mutex> lock(progress_mutex);
      progress(++planned, static_cast<int>(batches.size()));
    }
  });
  CandidateSelection out;
  const std::vector<int> added = GreedyCoverSelection(ms, always, more);
  out.kept.assign(always.begin(), always.end());
  out.kept.insert(out.kept.end(), added.begin(), added.end());
  std::sort(out.kept.begin(), out.kept.end());
  out.kept.erase(std::unique(out.kept.begin(), out.kept.end()), out.kept.end());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    double all = kInf, kept = kInf;
    for (std::size_t s = 0; s < count; ++s) all = std::min(all, ms[s][b]);
    for (int s : out.kept) kept = std::min(kept, ms[static_cast<std::size_t>(s)][b]);
    out.all_ms.push_back(all);
    out.kept_ms.push_back(kept);
  }
  return out;
}

}  // namespace hydraulis
