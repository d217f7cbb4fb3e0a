#include "hydraulis/assign/pack.h"
#include "hydraulis/base/tolerance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

namespace hydraulis {
namespace {

std::int64_t Len(const AssignProblem& problem, int d) {
  return problem.lengths[static_cast<std::size_t>(d)];
}

// Micro-batch counts TryRankBins tries above the first.
constexpr int kMaxRankBinCounts = 16;
// How far below its estimate a rank-bin packing's laid-out time may come (the layout rule
// may place its documents better): packings estimated slower than the best so far by
// more than this are not laid out.
constexpr double kEstimateSlack = 0.05;

// Micro-batch times, then the order with the least exact 1F1B time among a few shapes:
// the schedule exposes the first micro-batch's forward and the last one's backward, so
// small micro-batches belong at the ends.
double OrderForSchedule(const AssignProblem& problem, const PipelineModel& pipe,
                        MicroBatches& mbs) {
  const int v = static_cast<int>(mbs.size());
  const std::vector<double> t = MicroBatchStageMs(problem.lengths, pipe, mbs);
  if (pipe.scheme.pp == 1 || v <= 1) return OneFOneBMs(t, pipe.scheme.pp, problem.schedule);
  std::vector<int> asc(mbs.size());
  std::iota(asc.begin(), asc.end(), 0);
  std::stable_sort(asc.begin(), asc.end(), [&](int x, int y) { return t[x] < t[y]; });
  // Shape k's micro-batch at position j: 0 ascending; 1 descending; 2 smallest first,
  // second smallest last, the rest largest first in between; 3 smallest first, then
  // largest first (drains with a small backward tail).
  auto shape = [&](int k, int j) {
    switch (k) {
      case 0:
        return asc[j];
      case 1:
        return asc[v - 1 - j];
      case 2:
        return j == 0 ? asc[0] : j == v - 1 ? asc[1] : asc[v - j];
      default:
        return j == 0 ? asc[0] : asc[v - j];
    }
  };
  constexpr int kShapes = 4;
  double best = -1;
  int best_k = 0;
  thread_local std::vector<double> ordered;  // scratch: no allocation per call
  ordered.resize(mbs.size());
  for (int k = 0; k < kShapes; ++k) {
    for (int j = 0; j < v; ++j) ordered[j] = t[shape(k, j)];
    double ms = OneFOneBMs(ordered, pipe.scheme.pp, problem.schedule);
    if (best < 0 || DefinitelyLess(ms, best)) {
      best = ms;
      best_k = k;
    }
  }
  MicroBatches out(mbs.size());
  for (int j = 0; j < v; ++j) out[j] = std::move(mbs[shape(best_k, j)]);
  mbs = std::move(out);
  return best;
}

}  // namespace

std::vector<int> LongestFirst(std::span<const std::int64_t> lengths, std::span<const int> docs) {
  auto len = [&](int d) { return lengths[static_cast<std::size_t>(d)]; };
  // Stage 1 keeps each pipeline's documents by ascending (length, index): then the order is
  // its runs of equal lengths from the last one, each run as it is, in linear time (the
  // packers ask for it several times per re-pack).
  const bool ascending = std::is_sorted(docs.begin(), docs.end(), [&](int x, int y) {
    return len(x) != len(y) ? len(x) < len(y) : x < y;
  });
  std::vector<int> order;
  order.reserve(docs.size());
  if (ascending) {
    for (std::size_t end = docs.size(); end > 0;) {
      std::size_t begin = end - 1;
      while (begin > 0 && len(docs[begin - 1]) == len(docs[end - 1])) --begin;
      order.insert(order.end(), docs.begin() + static_cast<std::ptrdiff_t>(begin),
                   docs.begin() + static_cast<std::ptrdiff_t>(end));
      end = begin;
    }
    return order;
  }
  order.assign(docs.begin(), docs.end());
  std::sort(order.begin(), order.end(),
            [&](int x, int y) { return len(x) != len(y) ? len(x) > len(y) : x < y; });
  return order;
}

namespace {

// First fit in O(log bins) per document: a max-tree of the bins' free room over bin
// indices finds the leftmost bin with room for a document.
class FirstFitBins {
 public:
  explicit FirstFitBins(std::size_t max_bins) {
    while (size_ < max_bins) size_ *= 2;
    room_.assign(2 * size_, -1);
  }
  // Leftmost bin with room >= s, or -1.
  int Find(std::int64_t s) const {
    if (room_[1] < s) return -1;
    std::size_t node = 1;
    while (node < size_) node = room_[2 * node] >= s ? 2 * node : 2 * node + 1;
    return static_cast<int>(node - size_);
  }
  void Set(int bin, std::int64_t room) {
    std::size_t node = size_ + static_cast<std::size_t>(bin);
    room_[node] = room;
    for (node /= 2; node >= 1; node /= 2) {
      room_[node] = std::max(room_[2 * node], room_[2 * node + 1]);
    }
  }

 private:
  std::size_t size_ = 1;
  std::vector<std::int64_t> room_;
};

}  // namespace

MicroBatches MinCountPack(std::span<const std::int64_t> lengths, std::span<const int> docs,
                          std::int64_t capacity) {
  const std::vector<int> order = LongestFirst(lengths, docs);
  auto first_fit = [&] {
    MicroBatches bins;
    std::vector<std::int64_t> room;
    FirstFitBins tree(std::max<std::size_t>(1, order.size()));
    for (int d : order) {
      const std::int64_t s = lengths[d];
      int chosen = tree.Find(s);
      if (chosen < 0) {
        bins.emplace_back();
        room.push_back(capacity);
        chosen = static_cast<int>(bins.size()) - 1;
      }
      bins[chosen].push_back(d);
      room[chosen] -= s;
      tree.Set(chosen, room[chosen]);
    }
    return bins;
  };
  // Best fit: the bin with the least room that still fits, ties to the lowest index.
  auto best_fit = [&] {
    MicroBatches bins;
    std::set<std::pair<std::int64_t, int>> by_room;
    for (int d : order) {
      const std::int64_t s = lengths[d];
      auto it = by_room.lower_bound({s, std::numeric_limits<int>::min()});
      int chosen;
      std::int64_t room;
      if (it == by_room.end()) {
        bins.emplace_back();
        chosen = static_cast<int>(bins.size()) - 1;
        room = capacity;
      } else {
        chosen = it->second;
        room = it->first;
        by_room.erase(it);
      }
      bins[chosen].push_back(d);
      by_room.insert({room - s, chosen});
    }
    return bins;
  };
  MicroBatches ffd = first_fit();
  const std::int64_t total = std::accumulate(order.begin(), order.end(), std::int64_t{0},
                                             [&](std::int64_t a, int d) { return a + lengths[d]; });
  if (static_cast<std::int64_t>(ffd.size()) * capacity < total + capacity) return ffd;
  MicroBatches bfd = best_fit();
  return bfd.size() < ffd.size() ? bfd : ffd;
}

namespace {

// BalancedPack's state and its phases: place the documents longest first, each on the
// least-loaded micro-batch with room; then a local search that moves or swaps a document
// out of the slowest micro-batch while that lowers the larger of the two involved.
class BalancedPacking {
 public:
  BalancedPacking(const AssignProblem& problem, const PipelineModel& pipe, int v, MicroBatches& out)
      : problem_(problem),
        pipe_(pipe),
        cap_(pipe.capacity_tokens),
        out_(out),
        work_(v, 0.0),
        tokens_(v, 0),
        room_(static_cast<std::size_t>(v)) {
    // Cleared, not re-made: a caller packing count after count reuses the storage.
    out_.resize(static_cast<std::size_t>(v));
    for (auto& mb : out_) mb.clear();
    by_work_.resize(static_cast<std::size_t>(v));
    for (int b = 0; b < v; ++b)
      by_work_[static_cast<std::size_t>(b)] = {0.0, b}, room_.Set(b, cap_);
  }

  // Phase 1: false when a document finds no micro-batch with room.
  bool PlaceLongestFirst(const std::vector<int>& order) {
    for (int d : order) {
      const int chosen = LeastLoadedWithRoom(Len(problem_, d), -1);
      if (chosen < 0) return false;
      out_[chosen].push_back(d);
      Add(chosen, d, +1);
    }
    return true;
  }

  // Phase 2: at most `max_steps` improving moves or swaps. A move goes to the least-loaded
  // micro-batch with room; swaps look at the few least-loaded micro-batches, each for the
  // partner (by binary search on length, so on work) that best evens the pair. Both keep
  // a step O(documents in the slowest micro-batch * log), so large batches stay linear.
  void LocalSearch(int max_steps) {
    for (int step = 0; step < max_steps; ++step) {
      const int hi = by_work_.back().second;
      Step best;
      best.ms = work_[hi] - ToleranceMs(work_[hi]);
      FindBestMove(hi, best);
      FindBestSwap(hi, best);
      if (best.j < 0) break;
      Apply(hi, best);
    }
  }

  // Phase 3: false when a micro-batch is empty; else each micro-batch in index order.
  bool Finish() {
    for (const auto& mb : out_) {
      if (mb.empty()) return false;
    }
    for (auto& mb : out_) std::sort(mb.begin(), mb.end());
    return true;
  }

 private:
  // Micro-batches the least-loaded search looks at before the max-tree stands in.
  static constexpr int kScanned = 16;
  static constexpr int kSwapPartners = 4;

  // The best improvement found in one step: document i of the slowest micro-batch moves
  // to micro-batch j, or swaps with its document k.
  struct Step {
    double ms = 0;
    int j = -1;
    std::size_t i = 0, k = 0;
    bool swap = false;
  };

  double Work(int d) const { return pipe_.time.DocumentMs(Len(problem_, d)); }

  // Micro-batches in (work, index) order: the least-loaded one with room is the first that
  // fits.
  // Where the least-loaded few are all full (tight capacity), the leftmost one with room
  // (a max-tree of free room) stands in, so a placement never scans every micro-batch.
  int LeastLoadedWithRoom(std::int64_t s, int except) const {
    int scanned = 0;
    for (auto it = by_work_.begin(); it != by_work_.end() && scanned < kScanned; ++it, ++scanned) {
      if (it->second != except && tokens_[it->second] + s <= cap_) return it->second;
    }
    const int b = room_.Find(s);
    return b == except ? -1 : b;
  }

  void Add(int b, int d, double sign) {
    const std::pair<double, int> old{work_[b], b};
    work_[b] += sign * pipe_.time.DocumentMs(Len(problem_, d));
    tokens_[b] += static_cast<std::int64_t>(sign) * Len(problem_, d);
    Rekey(old, {work_[b], b});
    room_.Set(b, cap_ - tokens_[b]);
  }

  // Moves `old` of by_work_ to where `now` belongs, shifting the entries in between: the
  // order a search tree of (work, index) keeps, without a node per micro-batch (a pack of
  // v micro-batches allocated v of them, and the tree's rebalancing cost more than the
  // shift over the few dozen micro-batches a pipeline has).
  void Rekey(const std::pair<double, int>& old, const std::pair<double, int>& now) {
    const auto at = std::lower_bound(by_work_.begin(), by_work_.end(), old);
    if (now < old) {
      const auto to = std::lower_bound(by_work_.begin(), at, now);
      std::move_backward(to, at, at + 1);
      *to = now;
    } else {
      const auto to = std::lower_bound(at + 1, by_work_.end(), now);
      std::move(at + 1, to, at);
      *(to - 1) = now;
    }
  }

  void FindBestMove(int hi, Step& best) const {
    for (std::size_t i = 0; i < out_[hi].size(); ++i) {
      const int d = out_[hi][i];
      const double wd = Work(d);
      const int j = LeastLoadedWithRoom(Len(problem_, d), hi);
      if (j >= 0) {
        const double m = std::max(work_[hi] - wd, work_[j] + wd);
        if (m < best.ms) best.ms = m, best.j = j, best.i = i, best.swap = false;
      }
    }
  }

  void FindBestSwap(int hi, Step& best) {
    int partners = 0;
    for (auto it = by_work_.begin(); it != by_work_.end() && partners < kSwapPartners; ++it) {
      const int j = it->second;
      if (j == hi) continue;
      ++partners;
      // out_[j]'s positions by length (ties by position), for the binary search.
      partner_docs_.resize(out_[j].size());
      std::iota(partner_docs_.begin(), partner_docs_.end(), 0);
      std::sort(partner_docs_.begin(), partner_docs_.end(), [&](int x, int y) {
        const auto lx = Len(problem_, out_[j][x]), ly = Len(problem_, out_[j][y]);
        return lx != ly ? lx < ly : x < y;
      });
      for (std::size_t i = 0; i < out_[hi].size(); ++i) FindBestPartner(hi, j, i, best);
    }
  }

  // The swap of document i of micro-batch hi with a document of j that best evens them.
  void FindBestPartner(int hi, int j, std::size_t i, Step& best) const {
    const int d = out_[hi][i];
    const double wd = Work(d);
    // The pair is even when e's work is (work[hi] - work[j]) / 2 below d's.
    const double target = wd - 0.5 * (work_[hi] - work_[j]);
    auto pos = std::partition_point(partner_docs_.begin(), partner_docs_.end(),
                                    [&](int k) { return Work(out_[j][k]) < target; });
    const auto first = pos - std::min<std::ptrdiff_t>(2, pos - partner_docs_.begin());
    const auto last = pos + std::min<std::ptrdiff_t>(2, partner_docs_.end() - pos);
    for (auto p = first; p != last; ++p) {
      const std::size_t k = static_cast<std::size_t>(*p);
      const int e = out_[j][k];
      const double we = Work(e);
      if (we >= wd) continue;
      const std::int64_t ds = Len(problem_, d) - Len(problem_, e);
      if (tokens_[j] + ds > cap_) continue;
      const double m = std::max(work_[hi] - wd + we, work_[j] + wd - we);
      if (m < best.ms) best.ms = m, best.j = j, best.i = i, best.k = k, best.swap = true;
    }
  }

  void Apply(int hi, const Step& step) {
    const int d = out_[hi][step.i];
    if (step.swap) {
      const int e = out_[step.j][step.k];
      std::swap(out_[hi][step.i], out_[step.j][step.k]);
      Add(hi, d, -1), Add(hi, e, +1);
      Add(step.j, e, -1), Add(step.j, d, +1);
    } else {
      out_[hi].erase(out_[hi].begin() + static_cast<std::ptrdiff_t>(step.i));
      out_[step.j].push_back(d);
      Add(hi, d, -1), Add(step.j, d, +1);
    }
  }

  const AssignProblem& problem_;
  const PipelineModel& pipe_;
  const std::int64_t cap_;
  MicroBatches& out_;
  std::vector<double> work_;
  std::vector<std::int64_t> tokens_;
  std::vector<std::pair<double, int>> by_work_;  // sorted
  FirstFitBins room_;
  std::vector<int> partner_docs_;  // scratch of FindBestSwap
};

}  // namespace

bool BalancedPack(const AssignProblem& problem, const PipelineModel& pipe,
                  std::span<const int> docs, int v, int passes, MicroBatches& out) {
  const std::vector<int> order = LongestFirst(problem.lengths, docs);
  BalancedPacking packing(problem, pipe, v, out);
  if (!packing.PlaceLongestFirst(order)) return false;
  packing.LocalSearch(passes * std::min(std::max(1, static_cast<int>(docs.size())), v + 16));
  return packing.Finish();
}

bool ShapedPack(const AssignProblem& problem, const PipelineModel& pipe, std::span<const int> docs,
                std::span<const double> target_ms, MicroBatches& out) {
  const std::vector<int> order = LongestFirst(problem.lengths, docs);
  const std::size_t v = target_ms.size();
  MicroBatches bins(v);
  std::vector<double> work(v, 0.0);
  std::vector<std::int64_t> tokens(v, 0);
  for (int d : order) {
    const std::int64_t s = Len(problem, d);
    const double w = pipe.time.DocumentMs(s);
    int chosen = -1;
    double best = 0;
    for (std::size_t j = 0; j < v; ++j) {
      if (tokens[j] + s > pipe.capacity_tokens) continue;
      // Furthest below target after taking the document (least overshoot).
      const double slack = target_ms[j] - (work[j] + w);
      if (chosen < 0 || slack > best) {
        chosen = static_cast<int>(j);
        best = slack;
      }
    }
    if (chosen < 0) return false;
    bins[static_cast<std::size_t>(chosen)].push_back(d);
    work[static_cast<std::size_t>(chosen)] += w;
    tokens[static_cast<std::size_t>(chosen)] += s;
  }
  out.clear();
  for (auto& mb : bins) {
    if (mb.empty()) continue;
    std::sort(mb.begin(), mb.end());
    out.push_back(std::move(mb));
  }
  return true;
}

namespace {

// Per micro-batch and cp rank, the load and memory RankBinPacking has placed so far.
class RankBins {
 public:
  // `over_subsets`: shard over the fewest ranks (rank subsets only) or over every rank.
  RankBins(const AssignProblem& problem, const PipelineModel& pipe, std::size_t bins,
           bool over_subsets)
      : over_subsets_(over_subsets && pipe.shard.space == CpLayoutSpace::kAnySubset),
        problem_(problem),
        pipe_(pipe),
        cost_(pipe.shard),
        cp_(static_cast<std::size_t>(cost_.cp)),
        bins_(bins),
        load_(bins * cp_, 0.0),
        memory_(bins * cp_, 0.0),
        slowest_(bins, 0.0),
        fullest_(bins, 0.0),
        tokens_(bins, 0),
        mbs_(bins),
        by_load_(cp_) {}

  // Over rank subsets, a document no rank holds whole goes over the fewest ranks whose
  // memory holds it (the least exchange), the least loaded of the micro-batch whose k-th
  // least loaded rank with room is least loaded (ties: the lowest index); the other ranks
  // of that micro-batch stay free for whole documents. Otherwise a sharded document goes
  // to the micro-batch whose slowest rank is least loaded (ties: the lowest index) among
  // those with room on every rank. False where none has room.
  bool Shard(int d) {
    if (over_subsets_ && ShardOverSubset(d)) return true;
    const std::int64_t s = Len(problem_, d);
    const double share_memory = cost_.ShardedMemoryTokens(s);
    std::size_t chosen = bins_;
    double least = 0;
    for (std::size_t b = 0; b < bins_; ++b) {
      if (tokens_[b] + s > pipe_.capacity_tokens || !cost_.FitsRank(fullest_[b] + share_memory)) {
        continue;
      }
      const double t = slowest_[b];
      if (chosen == bins_ || t < least) chosen = b, least = t;
    }
    if (chosen == bins_) return false;
    const double share = cost_.ShardedDocumentMs(s);
    for (std::size_t r = 0; r < cp_; ++r) {
      load_[chosen * cp_ + r] += share;
      memory_[chosen * cp_ + r] += share_memory;
    }
    slowest_[chosen] += share;
    fullest_[chosen] += share_memory;
    tokens_[chosen] += s;
    mbs_[chosen].push_back(d);
    return true;
  }

  // Whole documents, longest first, each on the least-loaded rank with room (ties: the
  // lowest micro-batch, then rank): a min-heap of (load, rank), popped until one fits. One
  // that no rank holds whole beside what is there is sharded: it needs less of each. False
  // where that fails too.
  bool PlaceWhole(std::span<const int> order) {
    RebuildHeap();
    for (int d : order) {
      const std::int64_t s = Len(problem_, d);
      const auto tokens_s = static_cast<double>(s);
      if (!cost_.FitsRank(tokens_s)) continue;
      const std::size_t chosen = PopRankWithRoom(s);
      if (chosen == bins_ * cp_) {
        if (!Shard(d)) return false;
        RebuildHeap();
        continue;
      }
      load_[chosen] += cost_.whole.DocumentMs(s);
      memory_[chosen] += tokens_s;
      slowest_[chosen / cp_] = std::max(slowest_[chosen / cp_], load_[chosen]);
      fullest_[chosen / cp_] = std::max(fullest_[chosen / cp_], memory_[chosen]);
      heap_.push_back({load_[chosen], chosen});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
      tokens_[chosen / cp_] += s;
      mbs_[chosen / cp_].push_back(d);
    }
    return true;
  }

  // The micro-batches that hold documents, each sorted, into `out`; returns the packing's
  // time as the rank loads have it (the sum over them of c plus the slowest rank).
  double Finish(MicroBatches& out) {
    out.clear();
    double estimate_ms = 0;
    for (std::size_t b = 0; b < bins_; ++b) {
      if (mbs_[b].empty()) continue;
      estimate_ms += cost_.whole.c_ms + slowest_[b];
      std::sort(mbs_[b].begin(), mbs_[b].end());
      out.push_back(std::move(mbs_[b]));
    }
    return estimate_ms;
  }

 private:
  using Entry = std::pair<double, std::size_t>;  // (load, rank slot)

  bool ShardOverSubset(int d) {
    const std::int64_t s = Len(problem_, d);
    const int k = std::clamp(cost_.MinWidth(s), 2, cost_.cp);
    const double need = cost_.MemoryTokens(s, k);
    std::size_t chosen = bins_;
    double least = 0;
    for (std::size_t b = 0; b < bins_; ++b) {
      if (tokens_[b] + s > pipe_.capacity_tokens) continue;
      const auto at = [&](int r) { return b * cp_ + static_cast<std::size_t>(r); };
      for (std::size_t r = 0; r < cp_; ++r) by_load_[r] = static_cast<int>(r);
      std::sort(by_load_.begin(), by_load_.end(), [&](int x, int y) {
        return load_[at(x)] != load_[at(y)] ? load_[at(x)] < load_[at(y)] : x < y;
      });
      pick_.clear();
      for (int r : by_load_) {
        if (!cost_.FitsRank(memory_[at(r)] + need)) continue;
        pick_.push_back(r);
        if (pick_.size() == static_cast<std::size_t>(k)) break;
      }
      if (pick_.size() < static_cast<std::size_t>(k)) continue;
      const double top = load_[at(pick_.back())];
      if (chosen == bins_ || top < least) {
        chosen = b;
        least = top;
        chosen_pick_ = pick_;
      }
    }
    if (chosen == bins_) return false;
    std::sort(chosen_pick_.begin(), chosen_pick_.end());
    const double share = cost_.DocumentMs(s, k, cost_.IntraNode(chosen_pick_));
    for (int r : chosen_pick_) {
      const std::size_t slot = chosen * cp_ + static_cast<std::size_t>(r);
      load_[slot] += share;
      memory_[slot] += need;
      slowest_[chosen] = std::max(slowest_[chosen], load_[slot]);
      fullest_[chosen] = std::max(fullest_[chosen], memory_[slot]);
    }
    tokens_[chosen] += s;
    mbs_[chosen].push_back(d);
    return true;
  }

  void RebuildHeap() {
    heap_.clear();
    for (std::size_t k = 0; k < bins_ * cp_; ++k) heap_.push_back({load_[k], k});
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  }

  // Pops the least-loaded rank slot with room for a whole document of `s` tokens, the
  // slots skipped on the way put back; bins_ * cp_ where none has room.
  std::size_t PopRankWithRoom(std::int64_t s) {
    const auto tokens_s = static_cast<double>(s);
    std::size_t chosen = bins_ * cp_;
    skipped_.clear();
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      const std::size_t k = heap_.back().second;
      heap_.pop_back();
      if (tokens_[k / cp_] + s <= pipe_.capacity_tokens && cost_.FitsRank(memory_[k] + tokens_s)) {
        chosen = k;
        break;
      }
      skipped_.push_back({load_[k], k});
    }
    for (const Entry& e : skipped_) {
      heap_.push_back(e);
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    }
    return chosen;
  }

  const bool over_subsets_;
  const AssignProblem& problem_;
  const PipelineModel& pipe_;
  const ShardCost& cost_;
  const std::size_t cp_;
  const std::size_t bins_;
  std::vector<double> load_, memory_;  // per micro-batch and rank: slot b * cp_ + r
  // Per micro-batch: its slowest rank's load and its fullest rank's memory.
  std::vector<double> slowest_, fullest_;
  std::vector<std::int64_t> tokens_;
  MicroBatches mbs_;
  std::vector<Entry> heap_, skipped_;              // PlaceWhole's
  std::vector<int> by_load_, pick_, chosen_pick_;  // scratch of ShardOverSubset
};

// RankBinPack, also giving the packing's time as its own rank loads have it (the sum over
// micro-batches of c plus the slowest rank), which LayOutMicroBatch's layout of the same
// micro-batches matches or beats in most cases: cheap to compare counts by.
// `order`: the documents longest first (LongestFirst). Documents no rank holds whole are
// placed first, sharded, so the whole ones fill around them.
bool RankBinPacking(const AssignProblem& problem, const PipelineModel& pipe,
                    std::span<const int> order, int v, bool over_subsets, MicroBatches& out,
                    double& estimate_ms) {
  if (static_cast<std::size_t>(pipe.shard.cp) < 2 || v < 1) return false;
  RankBins bins(problem, pipe, static_cast<std::size_t>(v), over_subsets);
  for (int d : order) {
    if (!pipe.shard.FitsRank(static_cast<double>(Len(problem, d))) && !bins.Shard(d)) return false;
  }
  if (!bins.PlaceWhole(order)) return false;
  estimate_ms = bins.Finish(out);
  return true;
}

}  // namespace

bool RankBinPack(const AssignProblem& problem, const PipelineModel& pipe, std::span<const int> docs,
                 int v, MicroBatches& out) {
  double estimate_ms = 0;
  return RankBinPacking(problem, pipe, LongestFirst(problem.lengths, docs), v,
                        /*over_subsets=*/true, out, estimate_ms);
}

namespace {

// For a cp > 1 pipeline: rank-bin packings (RankBinPack) from the fewest micro-batches their
// memory allows upward, kept in `result` where their exact time is lower. Each further
// micro-batch costs c and buys room to place documents whole; stops at the first count
// that does not improve. With PackOptions::rank_bins_over_every_rank, over rank subsets,
// where some document must be sharded, the packing that shards it over every rank is tried
// too: the fewest ranks leave the others idle beside a slow shard when too few documents
// can fill them, and each micro-batch's layout still chooses among all subsets.
void TryRankBins(const AssignProblem& problem, const PipelineModel& pipe, std::span<const int> docs,
                 int fewest, const PackOptions& options, PackResult& result) {
  const ShardCost& cost = pipe.shard;
  if (cost.cp < 2 || cost.space == CpLayoutSpace::kEveryRank) return;
  // Rank memory the documents need, over all ranks of the pipeline, sharding those no rank
  // holds over the fewest ranks or over every rank.
  double demand_subsets = 0, demand_every = 0;
  bool any_whole = false, any_sharded = false;
  // No packing beats the documents' balanced work (with the exchange of those no rank
  // holds whole) plus c for each micro-batch the tokens need: where the fewest
  // micro-batches' packing reaches that, there is nothing to gain.
  double work_ms = 0;
  std::int64_t total = 0;
  for (int d : docs) {
    const std::int64_t s = Len(problem, d);
    work_ms += pipe.DocumentWorkMs(s);
    total += s;
    if (cost.FitsRank(static_cast<double>(s))) {
      demand_subsets += static_cast<double>(s);
      demand_every += static_cast<double>(s);
      any_whole = true;
      continue;
    }
    any_sharded = true;
    demand_every += cost.cp * cost.ShardedMemoryTokens(s);
    if (cost.space == CpLayoutSpace::kAnySubset) {
      const int k = std::clamp(cost.MinWidth(s), 2, cost.cp);
      demand_subsets += k * cost.MemoryTokens(s, k);
    }
  }
  if (!any_whole || !DefinitelyLess(PackingFloorMs(pipe, work_ms, total), result.ms)) return;
  const int n = static_cast<int>(docs.size());
  const std::vector<int> order = LongestFirst(problem.lengths, docs);
  const auto try_packings = [&](bool over_subsets, double demand) {
    const int from = std::max(
        fewest, static_cast<int>(std::ceil(demand / (cost.cp * cost.rank_capacity_tokens) - 1e-9)));
    // Counts compared by the packings' own estimate; the best is laid out exactly.
    MicroBatches candidate, best;
    double best_estimate = std::numeric_limits<double>::infinity();
    for (int v = from; v <= std::min(n, from + kMaxRankBinCounts); ++v) {
      double estimate_ms = 0;
      if (!RankBinPacking(problem, pipe, order, v, over_subsets, candidate, estimate_ms)) continue;
      if (!DefinitelyLess(estimate_ms, best_estimate)) break;
      best_estimate = estimate_ms;
      best.swap(candidate);
    }
    if (best.empty() || !DefinitelyLess(best_estimate * (1 - kEstimateSlack), result.ms)) return;
    const double ms = OrderForSchedule(problem, pipe, best);
    if (DefinitelyLess(ms, result.ms)) {
      result.ms = ms;
      result.micro_batches = std::move(best);
    }
  };
  const bool subsets = cost.space == CpLayoutSpace::kAnySubset;
  try_packings(subsets, subsets ? demand_subsets : demand_every);
  if (subsets && any_sharded && options.rank_bins_over_every_rank) {
    try_packings(false, demand_every);
  }
}

}  // namespace

PackResult PackPipeline(const AssignProblem& problem, const PipelineModel& pipe,
                        std::span<const int> docs, const PackOptions& options) {
  PackResult result;
  if (docs.empty()) return result;
  MicroBatches fewest = MinCountPack(problem.lengths, docs, pipe.capacity_tokens);
  for (auto& mb : fewest) std::sort(mb.begin(), mb.end());
  const int pp = pipe.scheme.pp;
  if (pp == 1) {
    const int count = static_cast<int>(fewest.size());
    result.ms = OrderForSchedule(problem, pipe, fewest);
    result.micro_batches = std::move(fewest);
    if (options.rank_bins) TryRankBins(problem, pipe, docs, count, options, result);
    return result;
  }
  double total_work = 0;
  for (int d : docs) total_work += pipe.time.DocumentMs(Len(problem, d));
  const int n = static_cast<int>(docs.size());
  const int v_min = static_cast<int>(fewest.size());
  const double c = pipe.time.c_ms;
  MicroBatches candidate;
  for (int v = v_min; v <= std::min(n, v_min + options.extra_micro_batch_counts); ++v) {
    // The last stage runs all v micro-batches plus at least one more slot of fill/drain.
    if (!result.micro_batches.empty() && total_work + (v + pp - 1) * c >= result.ms) break;
    // No packing into v micro-batches beats the relaxed schedule's bound for v: where that
    // is not below the best so far, BalancedPack's could not be kept either. Most counts
    // far from the best one.
    if (!result.micro_batches.empty() && options.relaxations != nullptr &&
        CannotComeBelow(options.relaxations->CountLowerBound(pp, v, c, total_work), result.ms)) {
      continue;
    }
    if (!BalancedPack(problem, pipe, docs, v, options.local_search_passes, candidate)) {
      if (v != v_min) continue;
      candidate = fewest;
    }
    const double ms = OrderForSchedule(problem, pipe, candidate);
    if (result.micro_batches.empty() || DefinitelyLess(ms, result.ms)) {
      result.ms = ms;
      result.micro_batches = candidate;
    }
  }
  if (options.relaxations != nullptr && c > 0) {
    // Shapes of the relaxed optimum around its best micro-batch count.
    const int v_best = options.relaxations->BestShape(pp, c, total_work).first;
    std::vector<double> target;
    for (int v = std::max(v_min, v_best - 2); v <= std::min(n, v_best + 2); ++v) {
      if (CannotComeBelow(options.relaxations->CountLowerBound(pp, v, c, total_work), result.ms)) {
        continue;
      }
      const auto& frac = options.relaxations->Shape(pp, v, c, total_work);
      target.resize(frac.size());
      for (std::size_t j = 0; j < frac.size(); ++j) target[j] = frac[j] * total_work;
      if (!ShapedPack(problem, pipe, docs, target, candidate)) continue;
      const double ms = PipelineMs(problem, pipe, candidate);
      if (DefinitelyLess(ms, result.ms)) {
        result.ms = ms;
        result.micro_batches = candidate;
      }
    }
  }
  if (options.rank_bins) TryRankBins(problem, pipe, docs, v_min, options, result);
  return result;
}

}  // namespace hydraulis
