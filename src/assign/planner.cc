#include "hydraulis/assign/planner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "baselines.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/parallel_for.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/cost/capacity.h"
#include "lower_bound.h"
#include "search_pool.h"

namespace hydraulis {
namespace {

// About 30 years: no real micro-batch takes longer; beyond it sums could overflow.
constexpr double kMaxMicroBatchMs = 1e12;

bool Homogeneous(const Strategy& s) {
  return std::all_of(s.pipelines.begin(), s.pipelines.end(),
                     [&](const Scheme& x) { return x == s.pipelines.front(); });
}

// The options a planner refuses whatever the profile: a candidate index or overheads that
// do not match the candidates, an algorithm this program does not link, and out-of-range
// numbers.
void CheckOptions(const PlannerOptions& options, const CandidateSet& candidates) {
  if (options.only_strategy < PlannerOptions::kStaticCandidate ||
      options.only_strategy >= static_cast<int>(candidates.strategies.size())) {
    throw InvalidInput("only_strategy " + std::to_string(options.only_strategy) +
                       " is not a candidate index (there are " +
                       std::to_string(candidates.strategies.size()) + ")");
  }
  if (!options.strategy_overhead_ms.empty() &&
      options.strategy_overhead_ms.size() != candidates.strategies.size()) {
    throw InvalidInput("strategy_overhead_ms has " +
                       std::to_string(options.strategy_overhead_ms.size()) + " entries for " +
                       std::to_string(candidates.strategies.size()) + " candidates");
  }
  for (double x : options.strategy_overhead_ms) {
    if (!(x >= 0)) throw InvalidInput("strategy_overhead_ms must be >= 0");
  }
  if (options.algorithm == Algorithm::kPublished && options.published_assigner == nullptr) {
    throw InvalidInput(
        "algorithm published is not available here: it needs the MILP planner "
        "(hydraulis_milp, CBC), which this program does not link");
  }
  if (options.threads < 0) {
    throw InvalidInput("threads must be >= 0 (0: one per hardware thread), got " +
                       std::to_string(options.threads));
  }
  if (!(options.prune_tolerance >= 0.0) || !std::isfinite(options.prune_tolerance)) {
    throw InvalidInput("prune tolerance must be a finite number >= 0, got " +
                       std::to_string(options.prune_tolerance));
  }
  if (options.context_tokens < 1) {
    throw InvalidInput("context length must be >= 1, got " +
                       std::to_string(options.context_tokens));
  }
}

// The model of strategy `st`'s pipelines on `scheme`, refused where the profile has no
// entry for it or it could not run a micro-batch.
PipelineModel CheckedPipelineModel(const Profile& profile, const CandidateSet& candidates,
                                   const Strategy& st, const Scheme& scheme, CpLayoutSpace space) {
  const SchemeProfile* sp = profile.Find(scheme);
  if (!sp) {
    throw InvalidInput("strategy " + QuoteForMessage(st.name) + ": scheme " + SchemeName(scheme) +
                       " has no fitted entry in the profile");
  }
  PipelineModel m = MakePipelineModel(profile, *sp, candidates.optimizer_layout);
  m.shard.space = space;
  // Every estimate and bound sums such times: a full micro-batch must cost a finite,
  // sane time, or plans would carry infinities (null in JSON) with exit status 0.
  const double full_ms =
      m.time.DocumentMs(std::max<std::int64_t>(m.capacity_tokens, 1)) + m.time.c_ms;
  if (!std::isfinite(full_ms) || full_ms > kMaxMicroBatchMs) {
    throw InvalidInput(
        "profile: scheme " + SchemeName(scheme) + ": its time model gives a full micro-batch (" +
        std::to_string(m.capacity_tokens) + " tokens) " +
        (std::isfinite(full_ms) ? std::to_string(full_ms) + " ms" : "an infinite time") +
        ", more than " + std::to_string(kMaxMicroBatchMs) +
        " ms; its coefficients are out of range");
  }
  if (m.capacity_tokens <= 0) {
    throw InvalidInput("strategy " + QuoteForMessage(st.name) + ": scheme " + SchemeName(scheme) +
                       " cannot hold even " + std::to_string(kTokenAlignment) +
                       " tokens in GPU memory with this optimizer layout");
  }
  return m;
}

// Strategy `st`'s pipeline models, in its order. Strategies of thousands of pipelines
// repeat a few schemes: each scheme's model is made (and checked) once, kept in `made`
// across strategies.
std::vector<PipelineModel> StrategyModels(const Profile& profile, const CandidateSet& candidates,
                                          const Strategy& st, CpLayoutSpace space,
                                          std::map<Scheme, PipelineModel>& made) {
  std::vector<PipelineModel> models;
  models.reserve(st.pipelines.size());
  for (const Scheme& scheme : st.pipelines) {
    auto it = made.find(scheme);
    if (it == made.end()) {
      it = made.emplace(scheme, CheckedPipelineModel(profile, candidates, st, scheme, space)).first;
    }
    models.push_back(it->second);
  }
  return models;
}

}  // namespace

Planner::Planner(const Profile& profile, const CandidateSet& candidates,
                 const PlannerOptions& options)
    : candidates_(candidates), options_(options), relaxations_(options.schedule) {
  CheckOptions(options_, candidates);
  std::int64_t static_cap = -1;
  std::map<Scheme, PipelineModel> made;
  for (std::size_t i = 0; i < candidates_.strategies.size(); ++i) {
    const Strategy& st = candidates_.strategies[i];
    std::vector<PipelineModel> models =
        StrategyModels(profile, candidates_, st, options_.cp_layout_space, made);
    groups_.push_back(GroupPipelines(models));
    models_.push_back(std::move(models));
    if (Homogeneous(st) && models_.back()[0].capacity_tokens > static_cap) {
      static_cap = models_.back()[0].capacity_tokens;
      static_index_ = static_cast<int>(i);
    }
  }
  if (options_.only_strategy == PlannerOptions::kStaticCandidate) {
    if (static_index_ < 0) {
      throw InvalidInput("the candidate set has no homogeneous strategy to run statically");
    }
    options_.only_strategy = static_index_;
  }
  static_run_index_ = options_.only_strategy >= 0 ? options_.only_strategy : static_index_;
}

std::int64_t Planner::MaxCapacity(int i) const {
  std::int64_t cap = 0;
  for (const auto& g : Groups(i)) cap = std::max(cap, g.model.capacity_tokens);
  return cap;
}

AssignProblem Planner::Problem(std::span<const std::int64_t> lengths, int i) const {
  AssignProblem p;
  p.lengths.assign(lengths.begin(), lengths.end());
  p.pipelines = Models(i);
  p.schedule = options_.schedule;
  return p;
}

namespace {

// Candidates in the order of their bounds plus overhead, each keyed first by its cheap
// bound and again by its full bound once computed (never lower): the front is then the
// next candidate in the order all full bounds would give, or one that needs its full
// bound first. Ties: the rank given at construction.
class CandidateOrder {
 public:
  struct Entry {
    double key;
    int rank;
    int index;
    bool full;  // keyed by the full bound
    bool operator<(const Entry& o) const { return key != o.key ? key < o.key : rank < o.rank; }
  };

  // `ranked`: candidates by cheap bound (their ranks); the first is left out (planned
  // before). `promise(i)`: candidate i's bound plus overhead, its full bound where
  // `full(i)`, else its cheap one.
  template <typename Promise, typename Full>
  CandidateOrder(const std::vector<int>& ranked, const Promise& promise, const Full& full,
                 std::size_t from = 1) {
    for (std::size_t r = from; r < ranked.size(); ++r) {
      entries_.insert({promise(ranked[r]), static_cast<int>(r), ranked[r], full(ranked[r])});
    }
  }

  const Entry* Front() const { return entries_.empty() ? nullptr : &*entries_.begin(); }
  Entry Pop() {
    const Entry e = *entries_.begin();
    entries_.erase(entries_.begin());
    return e;
  }
  // Pops the first `count` candidates in order that lack a full bound and whose cheap
  // bound plus overhead is below `best` (so threads can compute the bounds together; a
  // few may turn out not to be needed).
  void PopUnbounded(int count, double best, std::vector<Entry>& out) {
    std::vector<Entry> bounded;
    while (static_cast<int>(out.size()) < count && !entries_.empty()) {
      const Entry e = Pop();
      if (e.key >= best) {
        entries_.insert(e);
        break;
      }
      (e.full ? bounded : out).push_back(e);
    }
    entries_.insert(bounded.begin(), bounded.end());
  }
  // Puts back `e`, popped by PopUnbounded, keyed by its full bound plus overhead now.
  void PushBounded(Entry e, double key) {
    e.key = key;
    e.full = true;
    entries_.insert(e);
  }
  std::vector<int> Remaining() const {
    std::vector<int> out;
    for (const Entry& e : entries_) out.push_back(e.index);
    return out;
  }

 private:
  std::set<Entry> entries_;
};

// One batch's planning, phase by phase: the long-document rule, the candidates' bounds,
// the algorithm's search (ours with pruning, or a baseline), and assembling the plan.
// Holds what the phases share: the plan being built and the best assignment so far.
class BatchPlanning {
 public:
  BatchPlanning(const Planner& planner, const PlannerOptions& options, RelaxationTable& relaxations)
      : planner_(planner), options_(options), relaxations_(relaxations) {
    plan_.algorithm = options_.algorithm;
    static_index_ = planner_.StaticRunIndex();
    if (IsStatic() && static_index_ < 0) {
      throw InvalidInput("algorithm " + AlgorithmName(options_.algorithm) +
                         ": the candidate set has no homogeneous strategy to run statically");
    }
  }

  Plan Run(std::span<const std::int64_t> raw_lengths) {
    ApplyLongDocumentRule(raw_lengths);
    std::vector<int> usable = BoundCandidates();
    switch (options_.algorithm) {
      case Algorithm::kOurs:
        SearchOurs(std::move(usable));
        break;
      case Algorithm::kPublished:
        RunPublished(usable);
        break;
      case Algorithm::kStaticFixed:
        Consider(static_index_, AssignStaticFixed(Problem(static_index_), LongDocumentLimit()), 0);
        break;
      case Algorithm::kKarmarkarKarp:
        Consider(static_index_,
                 AssignKarmarkarKarp(Problem(static_index_), options_.two_stage.pack), 0);
        break;
    }
    Assemble();
    return std::move(plan_);
  }

 private:
  bool IsStatic() const {
    return options_.algorithm == Algorithm::kStaticFixed ||
           options_.algorithm == Algorithm::kKarmarkarKarp;
  }
  int CandidateCount() const { return static_cast<int>(planner_.candidates().strategies.size()); }
  AssignProblem Problem(int i) const { return planner_.Problem(plan_.lengths, i); }
  // Candidate i's full lower bound, from the planner's groups and this batch's length
  // counts (made once per step, not once per candidate).
  LowerBound FullBound(int i) {
    return ComputeLowerBound(planner_.Groups(i), length_counts_, options_.schedule, &relaxations_);
  }
  // Candidate i's report now holds its full bound.
  void SetFullBound(int i, double ms) {
    Report(i).lower_bound_ms = ms;
    full_bound_known_[static_cast<std::size_t>(i)] = 1;
  }

  // The usable candidate (`ranked`: by cheap bound plus overhead) with the least full
  // bound plus overhead (ties: the first in `ranked`). Takes full bounds one at a time for
  // the front of the order (cheap bound, or full once known) until the front has one, or
  // kFirstBounds of them (then the least of those), as one thread would; with more threads, once
  // the first front has moved, the next ones' bounds are computed together and kept for when they
  // are needed (computed_bound_ms_), so which bounds are reported does not depend on the thread
  // count. `workers_ahead`: the pool's workers are computing these bounds too.
  int LeastFullBound(const std::vector<int>& ranked, int threads, bool workers_ahead) {
    std::vector<int> order(ranked.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<int> fetch;
    // The first front's bound alone: where it equals its cheap bound (the batch's longest
    // document sets it), that candidate stays in front and no other bound is needed.
    int batch = 1;
    int taken = 0;
    for (;;) {
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
        return Promise(ranked[static_cast<std::size_t>(x)]) <
               Promise(ranked[static_cast<std::size_t>(y)]);
      });
      const int front = ranked[static_cast<std::size_t>(order.front())];
      if (full_bound_known_[static_cast<std::size_t>(front)]) return front;
      if (taken == kFirstBounds) {
        // The least full bound taken so far (ties: the order).
        for (const int r : order) {
          const int i = ranked[static_cast<std::size_t>(r)];
          if (full_bound_known_[static_cast<std::size_t>(i)]) return i;
        }
      }
      if (KnownBoundMs(front) == kInf) {
        fetch.clear();
        for (const int r : order) {
          const int i = ranked[static_cast<std::size_t>(r)];
          if (!full_bound_known_[static_cast<std::size_t>(i)] && KnownBoundMs(i) == kInf) {
            fetch.push_back(i);
          }
          if (static_cast<int>(fetch.size()) == batch) break;
        }
        batch = threads;
        // With the pool's workers computing the same bounds ahead, one thread here.
        ParallelFor(static_cast<int>(fetch.size()), workers_ahead ? 1 : threads,
                    [&](int k) { FullBoundMs(fetch[static_cast<std::size_t>(k)]); });
      }
      SetFullBound(front, FullBoundMs(front));
      ++taken;
    }
  }

  // FullBound's time, from computed_bound_ms_ when computed ahead (and kept there). Safe
  // to call from several threads.
  double FullBoundMs(int i) {
    std::unique_lock lock(bounds_mutex_);
    for (;;) {
      const auto it = computed_bound_ms_.find(i);
      if (it != computed_bound_ms_.end()) return it->second;
      // Another thread is computing it: wait for that.
      if (!bounds_in_flight_.contains(i)) break;
      bound_done_.wait(lock);
    }
    bounds_in_flight_.insert(i);
    lock.unlock();
    double ms = 0;
    try {
      ms = FullBound(i).ms;
    } catch (...) {
      lock.lock();
      bounds_in_flight_.erase(i);
      bound_done_.notify_all();
      throw;
    }
    lock.lock();
    bounds_in_flight_.erase(i);
    computed_bound_ms_.emplace(i, ms);
    bound_done_.notify_all();
    return ms;
  }
  // Stage 1's options for a candidate whose full bound is `full_bound` (the search stops
  // there: no plan of it goes lower), on `spare` threads.
  TwoStageOptions AssignOptions(double full_bound, int spare) {
    TwoStageOptions opts = options_.two_stage;
    opts.threads = spare;
    opts.pack.relaxations = &relaxations_;
    opts.stop_below_ms = std::max(opts.stop_below_ms, full_bound);
    return opts;
  }
  CandidateReport& Report(int i) { return plan_.candidates[static_cast<std::size_t>(i)]; }
  const CandidateReport& Report(int i) const {
    return plan_.candidates[static_cast<std::size_t>(i)];
  }
  double Overhead(int i) const {
    return options_.strategy_overhead_ms.empty()
               ? 0.0
               : options_.strategy_overhead_ms[static_cast<std::size_t>(i)];
  }

  // The longest document the algorithm can run at all: the static candidate's capacity
  // (static-fixed: also the context length), the restricted candidate's, or the widest.
  std::int64_t LongDocumentLimit() const {
    std::int64_t limit = 0;
    if (IsStatic() || options_.only_strategy >= 0) {
      limit = planner_.MaxCapacity(IsStatic() ? static_index_ : options_.only_strategy);
      if (options_.algorithm == Algorithm::kStaticFixed) {
        limit = std::min(limit, options_.context_tokens);
      }
    } else {
      for (int i = 0; i < CandidateCount(); ++i) limit = std::max(limit, planner_.MaxCapacity(i));
    }
    return limit;
  }

  // Phase 1: validates the lengths and truncates (or rejects) documents over the limit.
  void ApplyLongDocumentRule(std::span<const std::int64_t> raw_lengths) {
    const std::int64_t limit = LongDocumentLimit();
    plan_.lengths.assign(raw_lengths.begin(), raw_lengths.end());
    for (std::size_t d = 0; d < plan_.lengths.size(); ++d) {
      const std::int64_t s = plan_.lengths[d];
      if (s < 1) {
        throw InvalidInput("document " + std::to_string(d) + ": length must be >= 1, got " +
                           std::to_string(s));
      }
      if (s <= limit) continue;
      if (options_.overlong == OverlongRule::kReject) {
        throw Infeasible("document " + std::to_string(d) + " has " + std::to_string(s) +
                         " tokens, more than any candidate can hold (" + std::to_string(limit) +
                         "); rerun with truncation allowed or shorten it");
      }
      plan_.truncated.push_back({static_cast<int>(d), s, limit});
      plan_.lengths[d] = limit;
    }
  }

  // Phase 2: a report and a lower bound for every candidate; returns those the algorithm
  // may use (they hold the longest document). Ours starts from the cheap longest-document
  // bound and computes full bounds lazily in its search, so it can prune on the cheap one.
  std::vector<int> BoundCandidates() {
    const std::int64_t longest =
        plan_.lengths.empty() ? 0 : *std::max_element(plan_.lengths.begin(), plan_.lengths.end());
    plan_.candidates.resize(static_cast<std::size_t>(CandidateCount()));
    length_counts_ = LengthCounts(plan_.lengths);  // before any thread reads it
    std::vector<std::int64_t> distinct(length_counts_.size());
    for (std::size_t k = 0; k < distinct.size(); ++k) distinct[k] = length_counts_[k].first;
    std::vector<int> usable;
    for (int i = 0; i < CandidateCount(); ++i) {
      CandidateReport& rep = Report(i);
      rep.index = i;
      rep.name = planner_.candidates().strategies[static_cast<std::size_t>(i)].name;
      if (planner_.MaxCapacity(i) < longest) {
        rep.status = CandidateStatus::kCannotHold;
        rep.lower_bound_ms = kInf;
        continue;
      }
      const bool allowed = options_.only_strategy < 0 || i == options_.only_strategy;
      rep.lower_bound_ms = options_.algorithm == Algorithm::kOurs && allowed
                               ? LongestDocumentBoundMs(distinct, planner_.Groups(i))
                               : FullBound(i).ms;
      rep.status = CandidateStatus::kNotUsed;
      if (allowed) usable.push_back(i);
    }
    if (usable.empty()) throw InternalError("no candidate can hold the truncated batch");
    return usable;
  }

  // Records candidate i's assignment; keeps it when its score (what the algorithm
  // minimises) is below the best so far beyond the tolerance (ties: the earlier one).
  void Consider(int i, Assignment a, double score) {
    CandidateReport& rep = Report(i);
    rep.status = CandidateStatus::kPlanned;
    rep.estimated_step_ms = a.step_ms;
    plan_.time_limited_solves += a.time_limited_solves;
    if (best_index_ < 0 || DefinitelyLess(score, best_score_)) {
      best_score_ = score;
      prune_above_.store(PruneAbove(), std::memory_order_relaxed);
      best_index_ = i;
      best_ = std::move(a);
    }
  }

  // Phase 3 (ours): two-stage assignment of the most promising candidate first, then of
  // every other whose bound plus overhead can still beat the best score; the rest are
  // pruned. Ours minimises compute time plus the candidate's fixed overhead.
  //
  // The others are taken in the order of their full bounds plus overhead (ties: the order
  // of their cheap bounds, then their index), but a full bound is computed only when the
  // candidate reaches the front of that order with its cheap bound, which is never above
  // its full one: so the order is the one all full bounds would give, and a candidate
  // whose cheap bound already cannot beat the best plan never pays for its full bound
  // (nor do the rest, which come after it). Such a candidate reports its cheap bound.
  //
  // With several threads (PlannerOptions::threads) the full bounds of the next candidates
  // at the front are computed in parallel, and a pool of workers (SearchPool) searches the
  // candidates ahead of need, in the order this search would take them if no better plan
  // came first; this search takes their results in its own order and decides from them
  // alone. Every assignment and bound depends only on its candidate, so the plan is the
  // sequential one, byte for byte, whatever the thread count; searching ahead only spends
  // some discarded work.
  void SearchOurs(std::vector<int> usable) {
    const int threads = Threads();
    RankByCheapBound(usable);
    const double least = Promise(usable.front());
    Speculate(usable, threads);
    // Here, so that its workers are stopped and joined when the search ends, or throws.
    std::unique_ptr<SearchPool> pool;
    PlanFirst(usable, least, threads, pool);
    OrderTiesByRoom(usable, least, threads);
    PlanInOrder(usable, threads, pool.get());
  }

  // Candidate i's bound plus overhead: its full bound once its report holds it, else its
  // cheap one.
  double Promise(int i) const { return Report(i).lower_bound_ms + Overhead(i); }

  // Orders `usable` by cheap bound plus overhead (ties: as given), before any full bound.
  void RankByCheapBound(std::vector<int>& usable) {
    std::stable_sort(usable.begin(), usable.end(),
                     [&](int x, int y) { return Promise(x) < Promise(y); });
    cheap_promise_.assign(static_cast<std::size_t>(CandidateCount()), kInf);
    for (const int i : usable) cheap_promise_[static_cast<std::size_t>(i)] = Promise(i);
    full_bound_known_.assign(static_cast<std::size_t>(CandidateCount()), 0);
  }

  // Plans first the candidate with the least full bound, so the first plan is a good one
  // and prunes early, and moves it to the front of `usable`. It is found lazily, as the
  // search finds the next: full bounds are computed for the candidates at the front of the
  // order (cheap bound, or full once known; ties: the cheap order) until the front has one.
  // Where the least cheap bound is also its candidate's full bound, that candidate comes
  // first, as it did when the first was the least cheap bound's.
  //
  // More than kFirstBounds candidates tied at the least cheap bound (the longest document
  // sets it for every candidate that runs it on the same scheme: at 128K on thousands of
  // GPUs often hundreds) keep the first of them first: OrderTiesByRoom orders the rest
  // once its plan is known, and a plan at that bound prunes them all without their full
  // bounds.
  //
  // With threads to spare that Speculate did not take, starts `pool`.
  void PlanFirst(std::vector<int>& usable, double least, int threads,
                 std::unique_ptr<SearchPool>& pool) {
    const auto tied =
        std::count_if(usable.begin(), usable.end(), [&](int i) { return Promise(i) == least; });
    const bool pooled = threads >= 2 && speculated_.empty();
    // The pool's workers start at once, on the order of the cheap bounds, taking full bounds
    // as the search below does: most often they reach the same first candidate and search it
    // while the first is being chosen. Not where many candidates tie (below): the workers
    // would take all their full bounds.
    if (pooled && tied <= kFirstBounds) pool = StartPool(usable, 0, threads);
    const int first =
        tied > kFirstBounds ? usable.front() : LeastFullBound(usable, threads, pool != nullptr);
    if (!full_bound_known_[static_cast<std::size_t>(first)])
      SetFullBound(first, FullBoundMs(first));
    std::stable_partition(usable.begin(), usable.end(), [&](int i) { return i == first; });
    // Else the order the search will likely take after the first, by the bounds known now,
    // until OrderTiesByRoom has ordered the ties.
    if (pooled && !pool) pool = StartPool(usable, 1, threads);
    ConsiderOurs(first, AssignOurs(first, pool.get()));
  }

  // A pool of `threads` workers that search usable[from..] ahead of need, in the order the
  // bounds known now give (NextAhead).
  std::unique_ptr<SearchPool> StartPool(const std::vector<int>& usable, std::size_t from,
                                        int threads) {
    ahead_.emplace(
        usable,
        [this](int i) {
          const double known = KnownBoundMs(i);
          return known < kInf ? known + Overhead(i) : Promise(i);
        },
        [this](int i) { return KnownBoundMs(i) < kInf; }, from);
    return std::make_unique<SearchPool>(
        threads,
        [this](int i) {
          return SearchPool::Setup{Problem(i), AssignOptions(FullBoundMs(i), 1)};
        },
        [this] { return NextAhead(); });
  }

  // The candidates after the first, in the order of their full bounds plus overhead, while
  // the next can beat the best plan; the rest are pruned. `pool`, where started, searches
  // ahead in this order from now on.
  void PlanInOrder(const std::vector<int>& usable, int threads, SearchPool* pool) {
    CandidateOrder order(
        usable, [this](int i) { return Promise(i); },
        [this](int i) { return full_bound_known_[static_cast<std::size_t>(i)] != 0; });
    if (pool) {
      {
        const std::lock_guard lock(ahead_mutex_);
        ahead_ = order;
        ahead_bounding_.clear();
      }
      pool->Resume();
    }
    for (;;) {
      const CandidateOrder::Entry* front = order.Front();
      if (front == nullptr || Promise(front->index) >= PruneAbove()) break;
      if (front->full) {
        const int i = order.Pop().index;
        ConsiderOurs(i, AssignOurs(i, pool));
      } else {
        BoundFront(order, threads);
      }
    }
    // What is left cannot beat the best plan.
    for (const int i : order.Remaining()) Report(i).status = CandidateStatus::kPruned;
  }

  // Full bounds, computed together on `threads`, for the next candidates at the front of
  // `order` that still lack one; they go back into it keyed by them.
  void BoundFront(CandidateOrder& order, int threads) {
    std::vector<CandidateOrder::Entry> unbounded;
    order.PopUnbounded(kBoundsPerBatch * threads, PruneAbove(), unbounded);
    std::vector<double> bounds(unbounded.size(), 0.0);
    ParallelFor(static_cast<int>(unbounded.size()), threads, [&](int k) {
      bounds[static_cast<std::size_t>(k)] =
          FullBoundMs(unbounded[static_cast<std::size_t>(k)].index);
    });
    for (std::size_t k = 0; k < unbounded.size(); ++k) {
      const int i = unbounded[k].index;
      SetFullBound(i, bounds[k]);
      order.PushBounded(unbounded[k], Promise(i));
    }
  }

  // Candidate i's assignment; it stops at `full_bound` (i's full bound), as low as any
  // plan of i can go. `spare`: threads the candidate may use itself (Speculate's share of
  // them).
  Assignment AssignAt(int i, double full_bound, int spare) {
    return AssignTwoStage(Problem(i), AssignOptions(full_bound, spare));
  }
  // Candidate i's assignment, from Speculate, the pool, or here.
  Assignment AssignOurs(int i, SearchPool* pool) {
    if (const auto it = speculated_.find(i); it != speculated_.end()) {
      return std::move(it->second);
    }
    if (pool) return pool->Take(i);
    return AssignAt(i, Report(i).lower_bound_ms, 1);
  }
  // Ours scores a plan by its compute time plus the candidate's fixed overhead.
  void ConsiderOurs(int i, Assignment a) {
    const double score = a.step_ms + Overhead(i);
    Consider(i, std::move(a), score);
  }

  // Candidate i's full bound where computed already, else +infinity.
  double KnownBoundMs(int i) {
    const std::lock_guard lock(bounds_mutex_);
    const auto it = computed_bound_ms_.find(i);
    return it != computed_bound_ms_.end() ? it->second : kInf;
  }

  // For the pool's workers: the next candidate of ahead_ (the search's order as known when
  // it was copied) whose bound beats the best plan now, computing full bounds as the search
  // would, with its place among the answers; candidate -1 when none is left. A candidate
  // popped by one worker for its full bound is not in ahead_ meanwhile: another worker
  // finding a full bound at the front waits for it when it comes before, so the workers
  // take candidates in the order one thread would (at 1,024 GPUs and 128K a worker that did
  // not wait searched a candidate with a quick bound while the first's was still being
  // computed, delaying the first's search by 40-120 ms); one finding a front still without
  // its full bound computes it meanwhile, so the bounds are taken in parallel.
  SearchPool::Ahead NextAhead() {
    for (;;) {
      std::optional<CandidateOrder::Entry> e;
      int wait_for = -1;
      {
        const std::lock_guard lock(ahead_mutex_);
        const CandidateOrder::Entry* front = ahead_->Front();
        const CandidateOrder::Entry* before = nullptr;  // the first entry being bounded
        for (const CandidateOrder::Entry& b : ahead_bounding_) {
          if (before == nullptr || b < *before) before = &b;
        }
        const double prune = prune_above_.load(std::memory_order_relaxed);
        if ((front == nullptr || front->key >= prune) &&
            (before == nullptr || before->key >= prune)) {
          return {};
        }
        if (before != nullptr && (front == nullptr || *before < *front) &&
            (front == nullptr || front->full)) {
          wait_for = before->index;
        } else {
          e = ahead_->Pop();
          if (e->full) return {e->index, ahead_places_++};
          ahead_bounding_.push_back(*e);
        }
      }
      if (wait_for >= 0) {
        FullBoundMs(wait_for);  // waits while another thread computes it
        std::this_thread::yield();
        continue;
      }
      const double key = FullBoundMs(e->index) + Overhead(e->index);
      const std::lock_guard lock(ahead_mutex_);
      std::erase_if(ahead_bounding_,
                    [&](const CandidateOrder::Entry& b) { return b.index == e->index; });
      ahead_->PushBounded(*e, key);
    }
  }

  // With two threads per usable candidate or more, the first candidate alone leaves most
  // of them idle (its two assignments, plain and exchange-charged, take two), and so do
  // the candidates after it. Then every usable candidate gets its full bound and assignment at
  // once, two threads each, before the search, which takes them from here instead of
  // computing them when it reaches them: the step costs about its slowest candidate.
  // Bounds and assignments depend only on their candidate, so the plan is the one of one
  // thread, byte for byte; a candidate the search prunes only cost its threads' time.
  // With fewer threads, speculating on some candidates was slower than the search (one
  // H200 machine's 16 cores, 1,024 GPUs at 128K: 4 of 9 candidates at 8 threads, 961
  // against 856 ms median; all 8 usable at 16 threads, 471 against 715 ms).
  void Speculate(const std::vector<int>& usable, int threads) {
    const int count = static_cast<int>(usable.size());
    if (count < 2 || threads < 2 * count) return;
    std::vector<double> bounds(static_cast<std::size_t>(count));
    std::vector<Assignment> assigned(static_cast<std::size_t>(count));
    ParallelFor(count, count, [&](int k) {
      const int i = usable[static_cast<std::size_t>(k)];
      bounds[static_cast<std::size_t>(k)] = FullBound(i).ms;
      assigned[static_cast<std::size_t>(k)] =
          AssignAt(i, bounds[static_cast<std::size_t>(k)], threads / count);
    });
    for (int k = 0; k < count; ++k) {
      const int i = usable[static_cast<std::size_t>(k)];
      computed_bound_ms_[i] = bounds[static_cast<std::size_t>(k)];
      speculated_[i] = std::move(assigned[static_cast<std::size_t>(k)]);
    }
  }

  // Where the first plan did not reach the least cheap bound and other candidates share
  // that bound (the longest document sets the bound of every candidate that runs it on
  // the same scheme: at 128K often hundreds), they are tried in order of CoarseLoadMs at
  // it, least first (ties: as before), instead of by index: the room a strategy leaves
  // for the rest of the batch says which can reach the bound. usable[0] is the first.
  void OrderTiesByRoom(std::vector<int>& usable, double least, int threads) {
    if (!options_.order_ties_by_room || PruneAbove() <= least) return;
    auto tied_end = std::find_if(usable.begin() + 1, usable.end(), [&](int i) {
      return cheap_promise_[static_cast<std::size_t>(i)] != least;
    });
    const auto tied = static_cast<int>(tied_end - usable.begin()) - 1;
    if (tied < 2) return;
    std::vector<double> room(static_cast<std::size_t>(CandidateCount()), 0.0);
    ParallelFor(tied, threads, [&](int k) {
      const int i = usable[static_cast<std::size_t>(k) + 1];
      room[static_cast<std::size_t>(i)] =
          CoarseLoadMs(planner_.Groups(i), length_counts_, least - Overhead(i));
    });
    std::stable_sort(usable.begin() + 1, tied_end, [&](int x, int y) {
      return room[static_cast<std::size_t>(x)] < room[static_cast<std::size_t>(y)];
    });
  }

  // A candidate whose bound is at or above this cannot beat the best plan by more than
  // PlannerOptions::prune_tolerance: the best plan's score itself when the tolerance is 0.
  double PruneAbove() const { return best_score_ / (1.0 + options_.prune_tolerance); }

  // Threads for this batch: PlannerOptions::threads, or 1 when the batch is too small for
  // threads to pay for their start.
  int Threads() const {
    std::size_t widest = 0;
    std::size_t cp = 1;
    for (int i = 0; i < CandidateCount(); ++i) {
      widest = std::max(widest, planner_.Models(i).size());
      for (const PipelineModel& m : planner_.Models(i)) {
        cp = std::max(cp, static_cast<std::size_t>(m.scheme.cp));
      }
    }
    // Laying a micro-batch out over a cp group tries each document on up to cp ranks, at
    // several widths: such a pair costs about cp times a whole document's placement.
    const std::size_t pairs = widest * plan_.lengths.size() * cp;
    return pairs < kParallelPairs ? 1 : ResolveThreads(options_.threads);
  }
  // Full bounds computed together per thread when the search needs one: enough to keep
  // the threads evenly busy (bounds differ in cost), few enough that little is speculative.
  static constexpr int kBoundsPerBatch = 8;
  // Full bounds LeastFullBound takes at most: where many candidates have a cheap bound
  // below the least full bound, the first plan is not worth all of theirs.
  static constexpr int kFirstBounds = 16;
  // Pipelines x documents below which a batch is planned on one thread.
  static constexpr std::size_t kParallelPairs = std::size_t{1} << 16;

  // Phase 3 (published baseline): every usable candidate, kept by the published objective.
  void RunPublished(const std::vector<int>& usable) {
    for (int i : usable) {
      double published_ms = 0;
      Assignment a =
          options_.published_assigner(Problem(i), options_.published, options_.seed, &published_ms);
      Consider(i, std::move(a), published_ms);
    }
  }

  // Phase 4: the chosen candidate's pipelines with their micro-batches, token counts and
  // times, the batch's lower bound and the plan's status.
  void Assemble() {
    // Candidates pruned on the cheap bound never set the minimum: their bound is >= the
    // chosen plan's time >= the chosen candidate's own bound.
    plan_.lower_bound_ms = kInf;
    for (const auto& r : plan_.candidates) {
      plan_.lower_bound_ms = std::min(plan_.lower_bound_ms, r.lower_bound_ms);
    }
    const AssignProblem problem = Problem(best_index_);
#ifndef NDEBUG
    if (std::string err = CheckAssignment(problem, best_); !err.empty()) {
      throw InternalError(AlgorithmName(options_.algorithm) + " produced an invalid plan: " + err);
    }
#endif
    plan_.strategy_index = best_index_;
    plan_.overhead_ms = Overhead(best_index_);
    plan_.strategy = planner_.candidates().strategies[static_cast<std::size_t>(best_index_)];
    for (std::size_t p = 0; p < problem.pipelines.size(); ++p) {
      const PipelineModel& model = problem.pipelines[p];
      PipelinePlan pp;
      pp.scheme = model.scheme;
      pp.capacity_tokens = model.capacity_tokens;
      pp.micro_batches = best_.pipelines[p];
      pp.estimated_ms = best_.pipeline_ms[p];
      for (const auto& mb : pp.micro_batches) {
        for (int d : mb) pp.tokens += plan_.lengths[static_cast<std::size_t>(d)];
      }
      pp.closed_form_ms = OneFOneBUpperBoundMs(
          MicroBatchStageMs(plan_.lengths, model, pp.micro_batches), pp.scheme.pp);
      if (model.scheme.cp > 1) {
        pp.cp_layouts = MicroBatchLayouts(plan_.lengths, model, pp.micro_batches);
      }
      plan_.pipelines.push_back(std::move(pp));
    }
    plan_.estimated_step_ms = best_.step_ms;
    plan_.status = plan_.time_limited_solves > 0 ? SolveStatus::kTimeLimit
                   : NearlyEqual(plan_.estimated_step_ms, plan_.lower_bound_ms)
                       ? SolveStatus::kOptimal
                       : SolveStatus::kWithinGap;
  }

  const Planner& planner_;
  const PlannerOptions& options_;
  RelaxationTable& relaxations_;
  int static_index_ = -1;
  Plan plan_;
  std::vector<std::pair<std::int64_t, double>> length_counts_;  // of plan_.lengths
  // Speculate's assignments, by candidate.
  std::map<int, Assignment> speculated_;
  // Per candidate: its cheap bound plus overhead, and whether its report holds its full
  // bound yet.
  std::vector<double> cheap_promise_;
  std::vector<char> full_bound_known_;
  // Full bounds computed ahead of need (Speculate, LeastFullBound), by candidate; reported
  // only when the search takes them.
  std::map<int, double> computed_bound_ms_;
  std::mutex bounds_mutex_;         // guards computed_bound_ms_: the pool's workers add to it
  std::set<int> bounds_in_flight_;  // being computed by some thread
  std::condition_variable bound_done_;
  // PruneAbove(), for the pool's workers.
  std::atomic<double> prune_above_{kInf};
  // The pool's copy of the search's order (NextAhead), and its guard.
  std::optional<CandidateOrder> ahead_;
  std::vector<CandidateOrder::Entry> ahead_bounding_;  // popped from ahead_ for full bounds
  std::int64_t ahead_places_ = 0;                      // candidates NextAhead has given
  std::mutex ahead_mutex_;
  Assignment best_;
  int best_index_ = -1;
  double best_score_ = kInf;
};

}  // namespace

Plan Planner::PlanBatch(std::span<const std::int64_t> lengths) const {
  const auto t0 = std::chrono::steady_clock::now();
  Plan plan = BatchPlanning(*this, options_, relaxations_).Run(lengths);
  plan.planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

}  // namespace hydraulis
