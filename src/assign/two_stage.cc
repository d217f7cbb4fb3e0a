#include "hydraulis/assign/two_stage.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/idle_threads.h"
#include "hydraulis/base/parallel_for.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/base/word_hash.h"

namespace hydraulis {
namespace {

std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// EstimatePipelineMs for pp > 1, from the fewest micro-batches the tokens need.
double PipelinedEstimateMs(const PipelineModel& pipe, int v_min, double work_ms, double max_work_ms,
                           int docs) {
  const double c = pipe.time.c_ms;
  const int pp = pipe.scheme.pp;
  auto at = [&](int v) {
    return work_ms + v * c + (pp - 1) * (std::max(max_work_ms, work_ms / v) + c);
  };
  double best = at(v_min);
  // Without the max_work floor, the best v balances v*c against (pp-1)*work/v.
  const int v_star = c > 0 ? static_cast<int>(std::sqrt((pp - 1) * work_ms / c)) : docs;
  const int v_hi = std::max(v_min, docs);
  const int lo = std::clamp(v_star - 1, v_min, v_hi), hi = std::min(v_hi, v_star + 1);
  // Each count once (a count evaluated twice gives the same time).
  for (int v = lo == v_min ? lo + 1 : lo; v <= hi; ++v) best = std::min(best, at(v));
  // Where the largest document's cost starts to floor the micro-batch time.
  if (max_work_ms > 0) {
    const int v = std::clamp(static_cast<int>(work_ms / max_work_ms), v_min, v_hi);
    if (v != v_min && (v < lo || v > hi)) best = std::min(best, at(v));
  }
  return best;
}

// EstimatePipelineMs; the pp = 1 case small enough to inline into stage 1's dispatch loop.
inline double PipelineEstimateMs(const PipelineModel& pipe, std::int64_t tokens, double work_ms,
                                 double max_work_ms, int docs) {
  if (docs <= 0) return 0.0;
  const int v_min =
      static_cast<int>(std::max<std::int64_t>(1, CeilDiv(tokens, pipe.capacity_tokens)));
  if (pipe.scheme.pp == 1) return work_ms + v_min * pipe.time.c_ms;
  return PipelinedEstimateMs(pipe, v_min, work_ms, max_work_ms, docs);
}

// A pipeline's packing, shared between the search's state and its memo.
using Packing = std::shared_ptr<const PackResult>;

// What stage 1 tracks per pipeline.
struct Load {
  std::int64_t tokens = 0;
  double work = 0;
  double max_work = 0;  // an upper estimate after removals (recomputed on re-pack)
  int docs = 0;
};

class Solver {
 public:
  Solver(const AssignProblem& problem, const TwoStageOptions& options, bool charge_exchange)
      : problem_(problem),
        options_(options),
        P_(static_cast<int>(problem.pipelines.size())),
        charge_exchange_(charge_exchange) {}

  Assignment Run() {
    scale_.assign(P_, 1.0);
    Dispatch();
    for (int p = 0; p < P_ && !Stopped(); ++p) Repack(p);
    if (Stopped()) return Assignment{};
    LocalSearch();
    // Where the search stopped above the caller's bound with a cp pipeline the slowest, a
    // second attempt from a calibrated dispatch; the faster of the two is kept.
    const int slowest = Slowest();
    if (!Stopped() && options_.cp_calibration_rounds > 0 &&
        P_ <= options_.cp_calibration_max_pipelines &&
        packed_[slowest]->ms > options_.stop_below_ms &&
        problem_.pipelines[slowest].scheme.cp > 1) {
      const State first = Save();
      Calibrate();
      LocalSearch();
      if (!DefinitelyLess(packed_[Slowest()]->ms, first.step_ms)) Restore(first);
    }
    Assignment a;
    a.pipelines.resize(P_);
    for (int p = 0; p < P_; ++p) a.pipelines[p] = packed_[p]->micro_batches;
    Evaluate(problem_, a);
    return a;
  }

 private:
  bool Stopped() const {
    return options_.stop != nullptr && options_.stop->load(std::memory_order_relaxed);
  }

  // A document's share of its pipeline's work: its balanced share of the cp ranks, with
  // charge_exchange_ also the exchange of a document no rank can hold whole (which a
  // sharded document pays on every rank).
  double Work(int p, int d) const {
    const PipelineModel& m = problem_.pipelines[p];
    const std::int64_t s = problem_.lengths[static_cast<std::size_t>(d)];
    return charge_exchange_ ? m.DocumentWorkMs(s) : m.time.DocumentMs(s);
  }
  bool Fits(int p, int d) const {
    return problem_.lengths[static_cast<std::size_t>(d)] <= problem_.pipelines[p].capacity_tokens;
  }
  double Estimate(int p, const Load& l) const {
    return scale_[static_cast<std::size_t>(p)] *
           PipelineEstimateMs(problem_.pipelines[p], l.tokens, l.work, l.max_work, l.docs);
  }

  // The search's state, to try something and go back.
  struct State {
    std::vector<std::vector<int>> docs;
    std::vector<Packing> packed;
    std::vector<Load> load;
    std::vector<double> est, scale;
    double step_ms = 0;
  };
  State Save() const { return {docs_, packed_, load_, est_, scale_, packed_[Slowest()]->ms}; }
  void Restore(const State& s) {
    docs_ = s.docs, packed_ = s.packed, load_ = s.load, est_ = s.est, scale_ = s.scale;
  }

  // A cp pipeline's packed time exceeds its estimate (the exchange of documents sharded
  // because their micro-batch is full, the slowest rank), so stage 1 gives it more than it
  // can run in time. Dispatch again with each cp pipeline's estimate scaled by its packed
  // time over its estimate, for up to cp_calibration_rounds rounds, keeping the last
  // round that lowered the packed step (the first one always).
  void Calibrate() {
    for (int round = 0; round < options_.cp_calibration_rounds; ++round) {
      const State previous = Save();
      bool changed = false;
      for (int p = 0; p < P_; ++p) {
        if (problem_.pipelines[p].scheme.cp == 1 || !(est_[p] > 0)) continue;
        const double ratio = packed_[p]->ms / est_[p];
        if (std::abs(ratio - 1) < 1e-3) continue;
        scale_[static_cast<std::size_t>(p)] *= ratio;
        changed = true;
      }
      if (!changed) return;
      Dispatch();
      for (int p = 0; p < P_; ++p) Repack(p);
      if (round > 0 && !DefinitelyLess(packed_[Slowest()]->ms, previous.step_ms)) {
        Restore(previous);
        return;
      }
    }
  }

  Load With(int p, const Load& l, int d) const { return With(l, d, Work(p, d)); }
  // With, given the document's work on the pipeline.
  Load With(const Load& l, int d, double w) const {
    Load out = l;
    out.tokens += problem_.lengths[static_cast<std::size_t>(d)];
    out.work += w;
    out.max_work = std::max(out.max_work, w);
    ++out.docs;
    return out;
  }
  Load Without(int p, const Load& l, int d) const {
    Load out = l;
    out.tokens -= problem_.lengths[static_cast<std::size_t>(d)];
    out.work -= Work(p, d);
    --out.docs;
    if (out.docs == 0) out = Load{};
    return out;
  }

  // Stage 1: longest document first, each to the eligible pipeline whose estimated time
  // after taking it is least (ties: the pipeline that is less loaded now, then the lower
  // index, so identical pipelines fill evenly and deterministically). A group of more than
  // scanned_group_members identical pipelines offers only its least-loaded member (lowest
  // index on ties), kept in an ordered set, so a document costs O(groups + log P) rather
  // than O(P) on strategies of thousands of pipelines; smaller groups offer every member,
  // so such strategies dispatch exactly as the plain scan does
  // (TwoStageOptions::scanned_group_members).
  void Dispatch() {
    if (dispatch_order_.empty()) {  // the same for every dispatch (calibration rounds)
      std::vector<int> all(problem_.lengths.size());
      std::iota(all.begin(), all.end(), 0);
      dispatch_order_ = LongestFirst(problem_.lengths, all);
    }
    docs_.assign(P_, {});
    load_.assign(P_, Load{});
    est_.assign(P_, 0.0);
    // Pipelines of small groups (always offered) and, per large group, its members by
    // (estimate, index).
    std::vector<int> offered_always;
    std::vector<std::set<std::pair<double, int>>> large;
    std::vector<int> large_of(P_, -1);
    const std::vector<std::vector<int>> groups = GroupMembers(problem_.pipelines);
    std::vector<int> group_first, group_of(P_);
    for (const std::vector<int>& m : groups) {
      for (int p : m) group_of[p] = static_cast<int>(group_first.size());
      group_first.push_back(m.front());
    }
    std::vector<double> group_work(groups.size());
    for (const std::vector<int>& m : groups) {
      if (static_cast<int>(m.size()) <= options_.scanned_group_members) {
        offered_always.insert(offered_always.end(), m.begin(), m.end());
        continue;
      }
      large.emplace_back();
      for (int p : m) {
        large.back().insert({0.0, p});
        large_of[p] = static_cast<int>(large.size()) - 1;
      }
    }
    std::sort(offered_always.begin(), offered_always.end());
    std::vector<int> leaders;  // the large groups' least-loaded members, ascending
    for (int d : dispatch_order_) {
      leaders.clear();
      for (const auto& members : large) leaders.push_back(members.begin()->second);
      std::sort(leaders.begin(), leaders.end());
      // The document's work on each group's pipelines, once per group.
      for (std::size_t g = 0; g < group_work.size(); ++g) {
        group_work[g] = Work(group_first[g], d);
      }
      int best = -1;
      double best_after = 0;
      auto offer = [&](int p) {
        if (!Fits(p, d)) return;
        const double after = Estimate(p, With(load_[p], d, group_work[group_of[p]]));
        if (best < 0 || DefinitelyLess(after, best_after) ||
            (!DefinitelyLess(best_after, after) && DefinitelyLess(est_[p], est_[best]))) {
          best = p;
          best_after = after;
        }
      };
      // Every offered pipeline in index order (the ties' order): the two sorted lists merged.
      auto leader = leaders.begin();
      for (int p : offered_always) {
        for (; leader != leaders.end() && *leader < p; ++leader) offer(*leader);
        offer(p);
      }
      for (; leader != leaders.end(); ++leader) offer(*leader);
      if (best < 0) {
        throw InternalError("document " + std::to_string(d) + " fits no pipeline");
      }
      docs_[best].push_back(d);
      load_[best] = With(load_[best], d, group_work[group_of[best]]);
      if (large_of[best] >= 0) {
        auto& members = large[static_cast<std::size_t>(large_of[best])];
        members.erase({est_[best], best});
        members.insert({best_after, best});
      }
      est_[best] = best_after;
    }
    for (auto& docs : docs_) std::sort(docs.begin(), docs.end(), ByLength());
  }

  // Each pipeline's documents stay sorted by (length, index): a document's effect on
  // both pipelines of a move is monotone in its length, so the best partner is found by
  // binary search instead of a scan.
  struct LengthOrder {
    const std::vector<std::int64_t>* lengths;
    bool operator()(int x, int y) const {
      const auto lx = (*lengths)[static_cast<std::size_t>(x)];
      const auto ly = (*lengths)[static_cast<std::size_t>(y)];
      return lx != ly ? lx < ly : x < y;
    }
  };
  LengthOrder ByLength() const { return {&problem_.lengths}; }
  void Insert(std::vector<int>& v, int d) const {
    v.insert(std::lower_bound(v.begin(), v.end(), d, ByLength()), d);
  }

  void Repack(int p) { SetPacked(p, PackedOf(p, docs_[p])); }
  // Pipeline p's packing of its documents now, and what stage 1 tracks of them.
  void SetPacked(int p, Packing packed) {
    if (packed_.size() != static_cast<std::size_t>(P_)) packed_.resize(P_);
    packed_[p] = std::move(packed);
    Load l;
    for (int d : docs_[p]) l = With(p, l, d);
    load_[p] = l;
    est_[p] = Estimate(p, l);
  }

  // PackPipeline of pipeline p's documents, remembered by the exact list: about a third
  // of the search's re-packs repeat one (the slowest pipeline without the same document,
  // tried against several destinations; a calibrated dispatch that gives a pipeline what
  // the first one gave it). PackPipeline is a function of its arguments, so the plan is
  // the same bit for bit. The memory is bounded by the documents it holds. Packings are
  // shared, not copied: a repeat costs a lookup. Safe to call from a lent thread
  // (EvaluateMove).
  Packing PackedOf(int p, const std::vector<int>& docs) {
    {
      const std::lock_guard lock(packs_mutex_);
      if (const auto it = packs_.find(PackKeyView{p, docs}); it != packs_.end()) {
        return it->second;
      }
    }
    auto r = std::make_shared<const PackResult>(
        PackPipeline(problem_, problem_.pipelines[p], docs, options_.pack));
    const std::lock_guard lock(packs_mutex_);
    if (packed_documents_ > kRememberedDocuments) {
      packs_.clear();
      packed_documents_ = 0;
    }
    packed_documents_ += 2 * static_cast<std::int64_t>(docs.size());
    packs_.emplace(PackKey{p, docs}, r);
    return r;
  }
  struct PackKey {
    int p;
    std::vector<int> docs;
  };
  // A key to look up by, without copying the documents.
  struct PackKeyView {
    int p;
    std::span<const int> docs;
  };
  struct PackKeyHash {
    using is_transparent = void;
    std::size_t operator()(const PackKey& k) const { return (*this)(PackKeyView{k.p, k.docs}); }
    std::size_t operator()(const PackKeyView& k) const {
      return HashWords(k.docs, static_cast<std::uint64_t>(k.p));
    }
  };
  struct PackKeyEqual {
    using is_transparent = void;
    static PackKeyView View(const PackKey& k) { return {k.p, k.docs}; }
    static PackKeyView View(const PackKeyView& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const PackKeyView x = View(a), y = View(b);
      return x.p == y.p && std::ranges::equal(x.docs, y.docs);
    }
  };

  int Slowest() const {
    int s = 0;
    for (int p = 1; p < P_; ++p) {
      if (packed_[p]->ms > packed_[s]->ms) s = p;
    }
    return s;
  }

  struct Move {
    double score;
    int from_pos;  // index into docs_[crit]
    int to;        // destination pipeline
    int swap_pos;  // index into docs_[to], or -1 for a plain move
    int seq = 0;   // its place in the list as made: ties keep that order
  };

  // Estimated real time = estimate + (real - estimate) of the current state, so packing
  // effects the estimate misses (an extra micro-batch) carry over.
  double Corrected(int p, const Load& l) const {
    return Estimate(p, l) + (packed_[p]->ms - est_[p]);
  }

  // Positions in [0, end) of `sorted` around where `rising(i)` stops being below
  // `falling(i)` (rising non-decreasing and falling non-increasing in i, up to the
  // estimate's rounding): the minimum of their maximum is there.
  template <typename Rising, typename Falling>
  static std::pair<int, int> Crossing(int end, const Rising& rising, const Falling& falling) {
    int lo = 0, hi = end;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (rising(mid) < falling(mid)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return {std::max(0, lo - 2), std::min(end, lo + 2)};
  }

  // The re-pack budgets of one local search, in document placements (RepackCost): re-packing
  // is what a step costs, so the total is bounded by a multiple of the batch and large
  // batches stay near-linear (small ones never reach it). The estimate misjudges some
  // re-packs (cp layouts above all): when every one of a step's first tries fails, the step
  // keeps verifying further moves while a separate, smaller budget lasts, so the search goes
  // on only where it would have stopped.
  struct RepackBudget {
    std::int64_t total_limit = 0;
    std::int64_t extra_limit = 0;
    std::int64_t total = 0;
    std::int64_t extra = 0;

    bool Left() const { return total < total_limit; }
    // Counts a try costing `cost`; false, counting nothing, where it lies beyond the step's
    // first tries and the extra budget is spent.
    bool Charge(std::int64_t cost, bool beyond_tries) {
      if (beyond_tries) {
        if (extra >= extra_limit) return false;
        extra += cost;
      }
      total += cost;
      return true;
    }
  };

  // Stage 2: while moving a document off the slowest pipeline, or swapping it for a cheaper
  // one, lowers the step once re-packed, take the move; the budgets bound its cost.
  void LocalSearch() {
    const auto documents = static_cast<std::int64_t>(problem_.lengths.size());
    RepackBudget budget{kRepackBudgetPerDocument * documents + kRepackBudgetBase,
                        kExtraVerifyBudgetPerDocument * documents};
    for (int step = 0; step < options_.max_local_search_steps && budget.Left(); ++step) {
      if (Stopped()) return;
      const int crit = Slowest();
      const double limit = packed_[crit]->ms;
      if (limit <= options_.stop_below_ms) return;
      std::vector<Move> moves = PlainMoves(crit, limit);
      if (moves.empty()) moves = SwapMoves(crit, limit);
      if (moves.empty() || !TakeMove(crit, limit, moves, budget)) return;
    }
  }

  std::int64_t Length(int d) const { return problem_.lengths[static_cast<std::size_t>(d)]; }

  // The moves of one of the slowest pipeline's documents to another pipeline estimated to
  // lower both below `limit`; only around where the two estimates cross are they tried.
  std::vector<Move> PlainMoves(int crit, double limit) const {
    std::vector<Move> moves;
    const auto& from = docs_[crit];
    for (int q = 0; q < P_; ++q) {
      if (q == crit) continue;
      auto crit_after = [&](int i) { return Corrected(crit, Without(crit, load_[crit], from[i])); };
      auto q_after = [&](int i) { return Corrected(q, With(q, load_[q], from[i])); };
      const std::int64_t cap = problem_.pipelines[q].capacity_tokens;
      const int end = static_cast<int>(
          std::partition_point(from.begin(), from.end(), [&](int d) { return Length(d) <= cap; }) -
          from.begin());
      const auto [first, last] = Crossing(end, q_after, crit_after);
      for (int i = first; i < last; ++i) {
        const double ca = crit_after(i);
        if (!DefinitelyLess(ca, limit)) continue;
        const double score = std::max(ca, q_after(i));
        if (DefinitelyLess(score, limit)) moves.push_back({score, i, q, -1});
      }
    }
    return moves;
  }

  // Where no plain move lowers the step: swaps of a costlier document out of the slowest
  // pipeline for a cheaper one, for a spread of the slowest pipeline's documents (at most
  // kSwapSources of them).
  std::vector<Move> SwapMoves(int crit, double limit) const {
    std::vector<Move> moves;
    const auto& from = docs_[crit];
    const int n_from = static_cast<int>(from.size());
    const int stride = std::max(1, n_from / kSwapSources);
    for (int i = n_from - 1; i >= 0; i -= stride) {
      const int d = from[static_cast<std::size_t>(i)];
      const Load crit_without = Without(crit, load_[crit], d);
      for (int q = 0; q < P_; ++q) {
        if (q == crit || !Fits(q, d)) continue;
        const auto& to = docs_[q];
        const Load q_with = With(q, load_[q], d);
        // Cheaper partners are the shorter ones; they fit the slowest pipeline too.
        const int end =
            static_cast<int>(std::partition_point(to.begin(), to.end(),
                                                  [&](int e) { return Length(e) < Length(d); }) -
                             to.begin());
        auto crit_after = [&](int k) { return Corrected(crit, With(crit, crit_without, to[k])); };
        auto q_after = [&](int k) { return Corrected(q, Without(q, q_with, to[k])); };
        const auto [first, last] = Crossing(end, crit_after, q_after);
        for (int k = first; k < last; ++k) {
          const double ca = crit_after(k);
          if (!DefinitelyLess(ca, limit)) continue;
          const double score = std::max(ca, q_after(k));
          if (DefinitelyLess(score, limit)) moves.push_back({score, i, q, k});
        }
      }
    }
    return moves;
  }

  // Verifies `moves` in score order and applies the first that lowers the step. Failing
  // that, a cp pipeline's time is its slowest rank's: taking one short document off another
  // rank leaves it where it is, so no single move lowers it, while taking several would.
  // When the slowest pipeline is a cp one, the first verified move that leaves it no slower
  // and its destination below it (a level move) is applied instead. Documents then only
  // leave pipelines at the step's time for ones below it, so level moves end; they share
  // the step and re-pack budgets. Whether a move was applied.
  bool TakeMove(int crit, double limit, std::vector<Move>& moves, RepackBudget& budget) {
    const Verified verified = VerifyInOrder(crit, limit, moves, budget);
    if (verified.lowered) return true;
    if (verified.level < 0 || problem_.pipelines[crit].scheme.cp <= 1) return false;
    const Move& m = moves[static_cast<std::size_t>(verified.level)];
    budget.total += RepackCost(crit) + RepackCost(m.to);
    MoveOutcome outcome = EvaluateMove(crit, m, limit, true, false);
    if (!outcome.accepted) return false;
    ApplyMove(crit, m.to, std::move(outcome));
    return true;
  }

  struct Verified {
    bool lowered = false;  // a move that lowers the step was applied
    int level = -1;        // the first verified move that keeps the step where it is
  };

  // Verifies the moves by score, ties in the order made, while the budgets last, and applies
  // the first one that lowers the step. They are sorted only as far as the verification
  // reads (most steps stop within the first `tries`), the rest when it reads further.
  Verified VerifyInOrder(int crit, double limit, std::vector<Move>& moves, RepackBudget& budget) {
    for (std::size_t k = 0; k < moves.size(); ++k) moves[k].seq = static_cast<int>(k);
    auto by_score = [](const Move& a, const Move& b) {
      return a.score != b.score ? a.score < b.score : a.seq < b.seq;
    };
    std::size_t sorted = std::min<std::size_t>(
        moves.size(), static_cast<std::size_t>(options_.moves_verified_per_step));
    std::partial_sort(moves.begin(), moves.begin() + static_cast<std::ptrdiff_t>(sorted),
                      moves.end(), by_score);
    auto sort_all = [&] {
      std::sort(moves.begin() + static_cast<std::ptrdiff_t>(sorted), moves.end(), by_score);
      sorted = moves.size();
    };
    const int tries =
        std::min<int>(options_.moves_verified_per_step, static_cast<int>(moves.size()));
    auto charge = [&](int k, RepackBudget& b) {
      return b.Charge(RepackCost(crit) + RepackCost(moves[static_cast<std::size_t>(k)].to),
                      k >= tries);
    };
    Verified verified;
    std::vector<MoveOutcome> batch;  // outcomes of tries first_batched.. when evaluated so
    int first_batched = -1;
    for (int t = 0; t < static_cast<int>(moves.size()) && budget.Left(); ++t) {
      if (static_cast<std::size_t>(t) == sorted) sort_all();
      if (!charge(t, budget)) break;
      const Move& m = moves[static_cast<std::size_t>(t)];
      // The level test matters only until the first level move is found, and only on a
      // cp pipeline. A move evaluated with it gives the same verdict without it.
      const bool wants_level = verified.level < 0 && problem_.pipelines[crit].scheme.cp > 1;
      // With a thread lent (options_.helpers), once the first try has failed, the rest of
      // the tries the budgets reach are evaluated on both threads (a move's evaluation does
      // not change the state), and then taken in order as without it: the first accepted
      // wins, the budgets are counted up to it. A step that fails its first try mostly
      // fails all of them.
      if (t == 1 && options_.helpers != nullptr) {
        if (sorted < moves.size()) sort_all();
        // The last try the budgets reach should every one fail.
        int last = t;
        for (RepackBudget probe = budget; last + 1 < static_cast<int>(moves.size()) &&
                                          probe.Left() && charge(last + 1, probe);) {
          ++last;
        }
        if (last > t && EvaluateOnTwoThreads(crit, moves, t, last, limit, wants_level, batch)) {
          first_batched = t;
        }
      }
      MoveOutcome outcome = first_batched >= 0
                                ? std::move(batch[static_cast<std::size_t>(t - first_batched)])
                                : EvaluateMove(crit, m, limit, false, wants_level);
      if (outcome.accepted) {
        ApplyMove(crit, m.to, std::move(outcome));
        verified.lowered = true;
        return verified;
      }
      if (wants_level && outcome.keeps_level && verified.level < 0) verified.level = t;
    }
    return verified;
  }

  // What a move would do, the search's state unchanged: both pipelines' documents and
  // packings after it, and whether it is kept.
  struct MoveOutcome {
    bool accepted = false;
    bool keeps_level = false;  // the level test held (asked for by wants_level or level)
    std::vector<int> crit_docs, to_docs;
    Packing crit_packed, to_packed;
  };

  // Re-packs both pipelines as the move leaves them; it is kept if both end below `limit`
  // (or, with `level`, if the slowest pipeline ends no slower and the destination below).
  // `wants_level`: the caller also asks whether the latter held. Reads the state only, so a
  // lent thread may evaluate one move while this one evaluates another.
  MoveOutcome EvaluateMove(int crit, const Move& m, double limit, bool level, bool wants_level) {
    MoveOutcome o;
    if (DestinationCannotGoBelow(crit, m, limit)) return o;
    o.crit_docs = docs_[crit];
    const int d = o.crit_docs[static_cast<std::size_t>(m.from_pos)];
    o.crit_docs.erase(o.crit_docs.begin() + m.from_pos);
    if (m.swap_pos >= 0) Insert(o.crit_docs, docs_[m.to][static_cast<std::size_t>(m.swap_pos)]);
    o.crit_packed = PackedOf(crit, o.crit_docs);
    const double crit_ms = o.crit_packed->ms;
    // Where the slowest pipeline does not come out below `limit`, the move is not lower
    // whatever the destination's packing; nor is it level when it comes out above, or when
    // the caller does not ask. The destination is then not re-packed: about half of the
    // moves tried at 1,024 GPUs and 128K (a cp pipeline stays at its slowest rank's time),
    // the search unchanged.
    if (!level && !DefinitelyLess(crit_ms, limit) &&
        (!wants_level || DefinitelyLess(limit, crit_ms))) {
      return o;
    }
    o.to_docs = docs_[m.to];
    if (m.swap_pos >= 0) o.to_docs.erase(o.to_docs.begin() + m.swap_pos);
    Insert(o.to_docs, d);
    o.to_packed = PackedOf(m.to, o.to_docs);
    const double to_ms = o.to_packed->ms;
    const bool lower = DefinitelyLess(std::max(crit_ms, to_ms), limit);
    o.keeps_level = !DefinitelyLess(limit, crit_ms) && DefinitelyLess(to_ms, limit);
    o.accepted = lower || (level && o.keeps_level);
    return o;
  }

  // Tries first..last of `moves` evaluated on this thread and one lent by options_.helpers,
  // each taking the next untried one, both stopping past the first accepted; outcomes into
  // out[k - first] (those past the first accepted may be left empty). False, with nothing
  // evaluated, where no thread is lent now.
  bool EvaluateOnTwoThreads(int crit, const std::vector<Move>& moves, int first, int last,
                            double limit, bool wants_level, std::vector<MoveOutcome>& out) {
    out.assign(static_cast<std::size_t>(last - first + 1), MoveOutcome{});
    std::atomic<int> next{first}, first_accepted{last + 1};
    auto work = [&] {
      for (int k = next++; k <= last && k < first_accepted.load(); k = next++) {
        MoveOutcome& o = out[static_cast<std::size_t>(k - first)];
        o = EvaluateMove(crit, moves[static_cast<std::size_t>(k)], limit, false, wants_level);
        int seen = first_accepted.load();
        while (o.accepted && k < seen && !first_accepted.compare_exchange_weak(seen, k)) {
        }
      }
    };
    IdleThreads::Task task;
    task.run = work;
    if (!options_.helpers->Post(task)) return false;
    std::exception_ptr error;
    try {
      work();
    } catch (...) {
      error = std::current_exception();  // rethrown once the lent thread is done
    }
    options_.helpers->Reclaim(task);
    if (error) std::rethrow_exception(error);
    return true;
  }

  void ApplyMove(int crit, int to, MoveOutcome&& o) {
    docs_[crit] = std::move(o.crit_docs);
    docs_[to] = std::move(o.to_docs);
    SetPacked(crit, std::move(o.crit_packed));
    SetPacked(to, std::move(o.to_packed));
  }

  // Whether no packing of the move's destination, with the move's documents, can end
  // below `limit`: their PackingFloorMs cannot come below it (the plain search's work is
  // the balanced share alone, a lower floor still). Both the lower and the level test need
  // the destination below `limit`, so EvaluateMove would re-pack both pipelines only to refuse
  // the move; it refuses it at once: the same search, without the two re-packs. About 11 %
  // of the moves tried at 1,024 GPUs and 128K.
  bool DestinationCannotGoBelow(int crit, const Move& m, double limit) const {
    const int d = docs_[crit][static_cast<std::size_t>(m.from_pos)];
    Load l = With(m.to, load_[m.to], d);
    if (m.swap_pos >= 0) l = Without(m.to, l, docs_[m.to][static_cast<std::size_t>(m.swap_pos)]);
    return CannotComeBelow(PackingFloorMs(problem_.pipelines[m.to], l.work, l.tokens), limit);
  }

  // About what re-packing pipeline p costs, in document placements: pp > 1 pipelines
  // try several micro-batch counts.
  std::int64_t RepackCost(int p) const {
    const int counts =
        problem_.pipelines[p].scheme.pp > 1 ? 1 + options_.pack.extra_micro_batch_counts : 1;
    return counts * static_cast<std::int64_t>(docs_[p].size());
  }

  static constexpr int kSwapSources = 64;
  static constexpr std::int64_t kRepackBudgetPerDocument = 4;
  static constexpr std::int64_t kExtraVerifyBudgetPerDocument = 2;
  static constexpr std::int64_t kRepackBudgetBase = std::int64_t{1} << 19;

  const AssignProblem& problem_;
  const TwoStageOptions& options_;
  const int P_;
  const bool charge_exchange_;
  std::vector<std::vector<int>> docs_;
  std::vector<Load> load_;
  std::vector<double> est_;
  std::vector<double> scale_;  // per pipeline: what Calibrate learnt of its estimate
  std::vector<Packing> packed_;
  std::vector<int> dispatch_order_;  // the documents longest first (LongestFirst)
  std::unordered_map<PackKey, Packing, PackKeyHash, PackKeyEqual> packs_;
  std::mutex packs_mutex_;  // packs_ and packed_documents_: EvaluateMove may run on a lent thread
  std::int64_t packed_documents_ = 0;  // held by packs_, keys and packings
  // About 32 MB of document indices.
  static constexpr std::int64_t kRememberedDocuments = std::int64_t{1} << 23;
};

}  // namespace

double EstimatePipelineMs(const PipelineModel& pipe, std::int64_t tokens, double work_ms,
                          double max_work_ms, int docs) {
  return PipelineEstimateMs(pipe, tokens, work_ms, max_work_ms, docs);
}

bool HasExchangeSearch(const AssignProblem& problem) {
  return std::any_of(problem.pipelines.begin(), problem.pipelines.end(),
                     [](const PipelineModel& p) { return p.scheme.cp > 1; });
}

Assignment AssignTwoStageSearch(const AssignProblem& problem, const TwoStageOptions& options,
                                bool charge_exchange) {
  if (problem.pipelines.empty()) throw InvalidInput("strategy has no pipelines");
  return Solver(problem, options, charge_exchange).Run();
}

bool PlainSearchIsFinal(const Assignment& plain, const TwoStageOptions& options) {
  return plain.step_ms <= options.stop_below_ms;
}

Assignment KeptSearch(Assignment plain, std::optional<Assignment> charged,
                      const TwoStageOptions& options) {
  if (!charged || PlainSearchIsFinal(plain, options)) return plain;
  return DefinitelyLess(charged->step_ms, plain.step_ms) ? std::move(*charged) : std::move(plain);
}

Assignment AssignTwoStage(const AssignProblem& problem, const TwoStageOptions& options) {
  // With cp pipelines, also the assignment whose estimate charges the exchange of documents
  // that must be sharded: without it a wide cp pipeline looks nearly free and is overloaded
  // when long documents abound (128K), with it narrow ones are favoured too much when few
  // documents need sharding (32K). The faster of the two (the plain one on ties).
  if (!HasExchangeSearch(problem)) return AssignTwoStageSearch(problem, options, false);
  std::vector<Assignment> runs(2);
  if (options.threads >= 2) {
    ParallelFor(2, 2, [&](int k) {
      runs[static_cast<std::size_t>(k)] = AssignTwoStageSearch(problem, options, k == 1);
    });
  } else {
    runs[0] = AssignTwoStageSearch(problem, options, false);
    // A plain assignment at the stop level (the caller's lower bound) cannot be beaten.
    if (PlainSearchIsFinal(runs[0], options)) return std::move(runs[0]);
    runs[1] = AssignTwoStageSearch(problem, options, true);
  }
  return KeptSearch(std::move(runs[0]), std::move(runs[1]), options);
}

}  // namespace hydraulis
