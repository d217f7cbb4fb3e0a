#include "hydraulis/cost/cp_layout.h"

#include <algorithm>
#include <limits>
#include <string>

#include "hydraulis/base/enum_names.h"
#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

constexpr EnumNames<CpLayoutSpace, 3> kCpLayoutSpaceNames{
    {{CpLayoutSpace::kAnySubset, "subsets"},
     {CpLayoutSpace::kWholeOrEvery, "whole-or-every"},
     {CpLayoutSpace::kEveryRank, "every-rank"}}};

}  // namespace

std::string CpLayoutSpaceName(CpLayoutSpace space) {
  return std::string(NameOf(space, kCpLayoutSpaceNames));
}

CpLayoutSpace ParseCpLayoutSpace(std::string_view name, std::string_view what) {
  return ParseName(name, kCpLayoutSpaceNames, what);
}

CpLayout CpLayout::EveryRank(std::size_t documents, int cp) {
  CpLayout layout;
  layout.starts_.reserve(documents + 1);
  layout.ranks_.reserve(documents * static_cast<std::size_t>(std::max(cp, 1)));
  for (std::size_t i = 0; i < documents; ++i) layout.AddEvery(cp);
  return layout;
}

void CpLayout::Add(std::span<const int> ranks) {
  if (starts_.empty()) starts_.push_back(0);
  ranks_.insert(ranks_.end(), ranks.begin(), ranks.end());
  starts_.push_back(static_cast<int>(ranks_.size()));
}

void CpLayout::AddEvery(int cp) {
  if (starts_.empty()) starts_.push_back(0);
  for (int r = 0; r < cp; ++r) ranks_.push_back(r);
  starts_.push_back(static_cast<int>(ranks_.size()));
}

CpLayout CpLayoutFromPlaces(const std::vector<std::vector<int>>& places, int cp) {
  CpLayout layout;
  for (const std::vector<int>& ranks : places) {
    if (ranks.size() == 1 && ranks[0] == kSharded) {
      layout.AddEvery(cp);
    } else {
      layout.Add(ranks);
    }
  }
  return layout;
}

std::string CpLayoutError(const CpLayout& layout, std::size_t documents, int cp) {
  if (layout.empty()) {
    return cp == 1 || documents == 0 ? ""
                                     : "no layout for " + std::to_string(documents) +
                                           " documents on cp " + std::to_string(cp);
  }
  if (cp < 2) return "a cp 1 stage has no shard layout";
  if (layout.size() != documents) {
    return std::to_string(layout.size()) + " layout entries for " + std::to_string(documents) +
           " documents";
  }
  for (std::size_t d = 0; d < documents; ++d) {
    const std::span<const int> ranks = layout.Ranks(d);
    const std::string where = "document " + std::to_string(d) + ": ";
    if (ranks.empty()) return where + "no rank holds it (an empty rank set)";
    if (ranks.size() > static_cast<std::size_t>(cp)) {
      return where + std::to_string(ranks.size()) + " ranks, more than cp " + std::to_string(cp);
    }
    for (std::size_t j = 0; j < ranks.size(); ++j) {
      if (ranks[j] < 0 || ranks[j] >= cp) {
        return where + "rank " + std::to_string(ranks[j]) + " is outside a cp group of " +
               std::to_string(cp);
      }
      if (j > 0 && ranks[j] == ranks[j - 1]) {
        return where + "rank " + std::to_string(ranks[j]) + " is named twice";
      }
      if (j > 0 && ranks[j] < ranks[j - 1]) {
        return where + "ranks must be ascending (" + std::to_string(ranks[j - 1]) + " before " +
               std::to_string(ranks[j]) + ")";
      }
    }
  }
  return "";
}

TokenRange ShardChunk(std::int64_t length, int k, int chunk) {
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(k);
  const std::int64_t q = length / chunks, extra = length % chunks;
  const std::int64_t c = chunk;
  const std::int64_t begin = c * q + std::min(c, extra);
  return {begin, begin + q + (c < extra ? 1 : 0)};
}

std::array<TokenRange, 2> RankChunks(std::int64_t length, int k, int position) {
  return {ShardChunk(length, k, position), ShardChunk(length, k, 2 * k - 1 - position)};
}

ChunkHolder HolderOfChunk(int k, int chunk) {
  return chunk < k ? ChunkHolder{chunk, 0} : ChunkHolder{2 * k - 1 - chunk, 1};
}

std::int64_t RankShardTokens(std::int64_t length, int k, int position) {
  const auto chunks = RankChunks(length, k, position);
  return chunks[0].Size() + chunks[1].Size();
}

std::vector<RankSegment> RankSegments(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                      int cp, int rank) {
  if (cp < 1 || rank < 0 || rank >= cp) {
    throw InvalidInput("shard layout: rank " + std::to_string(rank) + " is outside a cp group of " +
                       std::to_string(cp));
  }
  if (!layout.empty() || cp > 1) {
    if (const std::string error = CpLayoutError(layout, lengths.size(), cp); !error.empty()) {
      throw InvalidInput("shard layout: " + error);
    }
  }
  std::vector<RankSegment> segments;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const int doc = static_cast<int>(i);
    if (layout.empty()) {
      segments.push_back({doc, {0, lengths[i]}});
      continue;
    }
    const std::span<const int> ranks = layout.Ranks(i);
    const auto at = std::find(ranks.begin(), ranks.end(), rank);
    if (at == ranks.end()) continue;
    if (ranks.size() == 1) {
      segments.push_back({doc, {0, lengths[i]}});
      continue;
    }
    const int k = static_cast<int>(ranks.size());
    for (const TokenRange& r : RankChunks(lengths[i], k, static_cast<int>(at - ranks.begin()))) {
      if (r.Size() > 0) segments.push_back({doc, r});
    }
  }
  return segments;
}

double ShardCost::FloorDocumentMs(std::int64_t tokens) const {
  // One rank's time over k ranks on one link is (w - u s) / k + u s with w the whole time
  // and u the link's exchange unit: monotone in k, so the least is at k = 1 or at the widest
  // k of each link (cp over the group's link; the node's ranks over NVLink).
  const double w = whole.DocumentMs(tokens);
  double best = std::min(w, DocumentMs(tokens, cp, cp <= ranks_per_node));
  if (space == CpLayoutSpace::kAnySubset && ranks_per_node >= 2 && ranks_per_node < cp) {
    best = std::min(best, DocumentMs(tokens, ranks_per_node, true));
  }
  return best;
}

double ShardCost::LeastExchangeWorkMs(std::int64_t tokens, int min_width) const {
  // Summed over its k ranks the exchange is u (k - 1) s: least at the narrowest width, on
  // the cheapest link that width can use.
  const double s = static_cast<double>(tokens);
  if (space != CpLayoutSpace::kAnySubset) return cp * kv_ms_per_token * s;
  const int k = std::clamp(min_width, 2, std::max(cp, 2));
  return k * ExchangeMsPerToken(k, k <= ranks_per_node) * s;
}

int ShardCost::MinWidth(std::int64_t tokens) const {
  if (FitsRank(static_cast<double>(tokens))) return 1;
  if (space != CpLayoutSpace::kAnySubset) return FitsRank(MemoryTokens(tokens, cp)) ? cp : cp + 1;
  for (int k = 2; k <= cp; ++k) {
    if (FitsRank(MemoryTokens(tokens, k))) return k;
  }
  return cp + 1;
}

}  // namespace hydraulis

namespace hydraulis {
namespace {

// Today's two-way rule works on one int per document: a rank, or kSharded.
using WholeOrEvery = std::vector<int>;

// One candidate of the two-way rule: the first `forced` documents of `order` (longest first)
// sharded, the others placed whole longest first on the least-loaded rank that holds them
// (sharded when none does), then documents of the slowest rank sharded while that helps.
// Returns false when a rank ends over its memory.
bool LayOut(std::span<const std::int64_t> lengths, const ShardCost& shard_cost,
            const std::vector<std::size_t>& order, std::size_t forced, WholeOrEvery& layout) {
  // A copy: the compiler need not reload its fields after every store to the loads below.
  const ShardCost cost = shard_cost;
  const std::size_t n = lengths.size();
  const auto ranks = static_cast<std::size_t>(cost.cp);
  layout.assign(n, 0);
  thread_local std::vector<double> load, memory;  // scratch: no allocation per call
  load.assign(ranks, 0.0);
  memory.assign(ranks, 0.0);
  auto shard = [&](std::size_t i) {
    layout[i] = kSharded;
    for (std::size_t r = 0; r < ranks; ++r) {
      load[r] += cost.ShardedDocumentMs(lengths[i]);
      memory[r] += cost.ShardedMemoryTokens(lengths[i]);
    }
  };
  for (std::size_t k = 0; k < forced; ++k) shard(order[k]);
  for (std::size_t k = forced; k < n; ++k) {
    const std::size_t i = order[k];
    const double tokens = static_cast<double>(lengths[i]);
    // The least-loaded rank with room (the first on ties), without a branch per rank.
    std::size_t best = ranks;
    double best_load = std::numeric_limits<double>::infinity();
    for (std::size_t r = 0; r < ranks; ++r) {
      const double l = cost.FitsRank(memory[r] + tokens) ? load[r] : best_load;
      best = l < best_load ? r : best;
      best_load = std::min(l, best_load);
    }
    if (best == ranks) {
      shard(i);
      continue;
    }
    layout[i] = static_cast<int>(best);
    load[best] += cost.whole.DocumentMs(lengths[i]);
    memory[best] += tokens;
  }
  // Sharding a document placed on the slowest rank helps when the rank it leaves gains more
  // than every rank loses to its share: few documents of similar length, where balancing
  // whole documents cannot even out.
  while (true) {
    const auto slowest =
        static_cast<std::size_t>(std::max_element(load.begin(), load.end()) - load.begin());
    double best_max = load[slowest];
    std::size_t best_doc = n;
    for (std::size_t i : order) {
      if (layout[i] != static_cast<int>(slowest)) continue;
      const double share = cost.ShardedDocumentMs(lengths[i]);
      const double share_memory = cost.ShardedMemoryTokens(lengths[i]);
      double new_max = 0;
      bool fits = true;
      for (std::size_t r = 0; r < ranks; ++r) {
        const bool own = r == slowest;
        new_max =
            std::max(new_max, load[r] - (own ? cost.whole.DocumentMs(lengths[i]) : 0.0) + share);
        fits = fits && cost.FitsRank(memory[r] - (own ? static_cast<double>(lengths[i]) : 0.0) +
                                     share_memory);
      }
      if (fits && new_max < best_max) {
        best_max = new_max;
        best_doc = i;
      }
    }
    if (best_doc == n) break;
    load[slowest] -= cost.whole.DocumentMs(lengths[best_doc]);
    memory[slowest] -= static_cast<double>(lengths[best_doc]);
    shard(best_doc);
  }
  return std::all_of(memory.begin(), memory.end(), [&](double m) { return cost.FitsRank(m); });
}

// The two-way layout's stage time (the same sums as LaidOutStageMs).
double WholeOrEveryMs(std::span<const std::int64_t> lengths, const WholeOrEvery& layout,
                      const ShardCost& cost) {
  thread_local std::vector<double> load;  // scratch: no allocation per call
  load.assign(static_cast<std::size_t>(cost.cp), 0.0);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (layout[i] == kSharded) {
      const double t = cost.ShardedDocumentMs(lengths[i]);
      for (double& l : load) l += t;
    } else {
      load[static_cast<std::size_t>(layout[i])] += cost.whole.DocumentMs(lengths[i]);
    }
  }
  return cost.whole.c_ms + *std::max_element(load.begin(), load.end());
}

void ToCpLayout(const WholeOrEvery& two_way, int cp, CpLayout& layout) {
  layout.Clear();
  for (int where : two_way) {
    if (where == kSharded) {
      layout.AddEvery(cp);
    } else {
      layout.AddWhole(where);
    }
  }
}

// The two-way rule: the best candidate, or every document sharded. Returns its time.
double BestWholeOrEvery(std::span<const std::int64_t> lengths, const ShardCost& cost,
                        const std::vector<std::size_t>& order, WholeOrEvery& best) {
  // How many of the longest documents the time rule would shard: each whose whole time
  // exceeds the balanced share of it and the documents after it plus its own exchange.
  double unsharded_ms = 0;
  for (std::int64_t s : lengths) unsharded_ms += cost.whole.DocumentMs(s);
  std::size_t long_documents = 0;
  for (std::size_t i : order) {
    const double whole = cost.whole.DocumentMs(lengths[i]);
    if (whole <= unsharded_ms / cost.cp + cost.kv_ms_per_token * static_cast<double>(lengths[i])) {
      break;
    }
    ++long_documents;
    unsharded_ms -= whole;
  }
  // Ties go to the fewest sharded documents (the least communication).
  thread_local WholeOrEvery candidate;
  best.clear();
  double best_ms = std::numeric_limits<double>::infinity();
  for (std::size_t forced = 0; forced <= long_documents; ++forced) {
    if (!LayOut(lengths, cost, order, forced, candidate)) continue;
    const double ms = WholeOrEveryMs(lengths, candidate, cost);
    if (ms < best_ms) {
      best_ms = ms;
      best.swap(candidate);  // LayOut rewrites all of `candidate`
    }
  }
  const WholeOrEvery all(lengths.size(), kSharded);
  const double all_ms = WholeOrEveryMs(lengths, all, cost);
  if (best.empty() || all_ms < best_ms) {
    best = all;
    return all_ms;
  }
  return best_ms;
}

// A subset layout being built: each rank's load and memory, and per document its ranks
// and its time on each of them. One per thread, reset per micro-batch: its buffers keep
// their capacity, so laying out allocates nothing once warm.
class SubsetSchedule {
 public:
  static SubsetSchedule& ForThread() {
    thread_local SubsetSchedule schedule;
    return schedule;
  }

  void Reset(std::span<const std::int64_t> lengths, const ShardCost& cost) {
    lengths_ = lengths;
    cost_ = &cost;
    cp_ = cost.cp;
    const auto ranks = static_cast<std::size_t>(cp_);
    load_.assign(ranks, 0.0);
    memory_.assign(ranks, 0.0);
    by_load_.resize(ranks);
    ranks_.assign(lengths.size() * ranks, 0);
    width_.assign(lengths.size(), 0);
    time_.assign(lengths.size(), 0.0);
    blocks_ = (cp_ + cost.ranks_per_node - 1) / cost.ranks_per_node;
  }

  // A place for a document: its ranks (ascending) and its time on each.
  struct Place {
    std::vector<int> ranks;
    double time = 0;
    double key = std::numeric_limits<double>::infinity();  // what the choice minimised
  };

  // The best place for document `d` (not placed) over every width min_width <= k <=
  // max_width and, for each k, the k least-loaded ranks with room in each node and in the
  // whole group.
  // `key(top, t, k, ex)` scores a place whose most loaded rank has `top` before it, time t
  // per rank and exchange ex per rank; the least wins (ties: the first found, narrower
  // widths first). No place scores below `floor`: the search stops at one that does. The
  // key must not fall as any of its arguments rises.
  template <typename Key>
  bool Best(std::size_t d, int min_width, int max_width, Key key, double floor, Place& best) {
    const ShardCost& cost = *cost_;
    const std::int64_t s = lengths_[d];
    const double w = cost.whole.DocumentMs(s);
    for (int r = 0; r < cp_; ++r) by_load_[static_cast<std::size_t>(r)] = r;
    std::sort(by_load_.begin(), by_load_.end(), [&](int x, int y) {
      const double lx = load_[static_cast<std::size_t>(x)], ly = load_[static_cast<std::size_t>(y)];
      return lx != ly ? lx < ly : x < y;
    });
    best.key = std::numeric_limits<double>::infinity();
    best.ranks.clear();
    auto consider = [&](int k, int block) {
      const double need = Need(s, k);
      pick_.clear();
      for (int r : by_load_) {
        if (block >= 0 && r / cost.ranks_per_node != block) continue;
        if (!cost.FitsRank(memory_[static_cast<std::size_t>(r)] + need)) continue;
        pick_.push_back(r);
        if (static_cast<int>(pick_.size()) == k) break;
      }
      if (static_cast<int>(pick_.size()) < k) return;
      // pick_ is in load order: its last rank is its most loaded.
      const double top = load_[static_cast<std::size_t>(pick_.back())];
      std::sort(pick_.begin(), pick_.end());
      const double t = TimeOf(s, pick_);
      const double score = key(top, t, k, t - w / k);
      if (score < best.key) {
        best.key = score;
        best.time = t;
        best.ranks.assign(pick_.begin(), pick_.end());
      }
    };
    for (int k = min_width; k <= max_width && best.key > floor; ++k) {
      // No place of width k scores below the key of its k-th least loaded rank at the
      // cheapest link (the keys rise with each argument): past the best, it is skipped.
      const double least_exchange =
          cost.ExchangeMsPerToken(k, k <= cost.ranks_per_node) * static_cast<double>(s);
      const double least =
          key(load_[static_cast<std::size_t>(by_load_[static_cast<std::size_t>(k - 1)])],
              w / k + least_exchange, k, least_exchange);
      if (least > best.key * (1 + 1e-12)) continue;
      if (k >= 2 && k <= cost.ranks_per_node && blocks_ > 1) {
        for (int b = 0; b < blocks_; ++b) consider(k, b);
      }
      consider(k, -1);
    }
    return !best.ranks.empty();
  }

  void Put(std::size_t d, const Place& place) {
    const int k = static_cast<int>(place.ranks.size());
    const double need = Need(lengths_[d], k);
    for (int r : place.ranks) {
      load_[static_cast<std::size_t>(r)] += place.time;
      memory_[static_cast<std::size_t>(r)] += need;
    }
    std::copy(place.ranks.begin(), place.ranks.end(),
              ranks_.begin() + static_cast<std::ptrdiff_t>(d * static_cast<std::size_t>(cp_)));
    width_[d] = k;
    time_[d] = place.time;
  }

  // Removes document `d` and returns its place in `place`.
  void Take(std::size_t d, Place& place) {
    const std::span<const int> ranks = Ranks(d);
    place.ranks.assign(ranks.begin(), ranks.end());
    place.time = time_[d];
    const double need = Need(lengths_[d], width_[d]);
    for (int r : place.ranks) {
      load_[static_cast<std::size_t>(r)] -= place.time;
      memory_[static_cast<std::size_t>(r)] -= need;
    }
    width_[d] = 0;
  }

  double Slowest() const { return *std::max_element(load_.begin(), load_.end()); }
  int SlowestRank() const {
    return static_cast<int>(std::max_element(load_.begin(), load_.end()) - load_.begin());
  }
  std::span<const int> Ranks(std::size_t d) const {
    return {ranks_.data() + d * static_cast<std::size_t>(cp_), static_cast<std::size_t>(width_[d])};
  }

 private:
  SubsetSchedule() = default;

  double Need(std::int64_t s, int k) const {
    return k == 1 ? static_cast<double>(s) : cost_->MemoryTokens(s, k);
  }
  double TimeOf(std::int64_t s, std::span<const int> ranks) const {
    const int k = static_cast<int>(ranks.size());
    if (k == 1) return cost_->whole.DocumentMs(s);
    return k == cp_ ? cost_->ShardedDocumentMs(s)
                    : cost_->DocumentMs(s, k, cost_->IntraNode(ranks));
  }

  std::span<const std::int64_t> lengths_;
  const ShardCost* cost_ = nullptr;
  int cp_ = 1, blocks_ = 1;
  std::vector<double> load_, memory_;
  std::vector<int> by_load_, pick_;
  std::vector<int> ranks_;  // document d's ranks: ranks_[d * cp_ .. d * cp_ + width_[d])
  std::vector<int> width_;
  std::vector<double> time_;
};

// The list schedule over widths up to `max_width`, then moves that lower the slowest rank
// (LayOutMicroBatch, kAnySubset). Returns false when some document finds no width with room.
// `widest`: the widest place it chose at any point; with a cap at least that, the schedule
// would make the very same choices.
bool ListScheduleOverWidths(std::span<const std::int64_t> lengths, const ShardCost& cost,
                            const std::vector<std::size_t>& order, int max_width, bool least_widths,
                            CpLayout& layout, int& widest) {
  widest = 0;
  const std::size_t n = lengths.size();
  const double cp = cost.cp;
  SubsetSchedule& schedule = SubsetSchedule::ForThread();
  schedule.Reset(lengths, cost);
  thread_local SubsetSchedule::Place place, old;
  double remaining = 0, total = 0;
  for (std::int64_t s : lengths) remaining += cost.whole.DocumentMs(s);
  // Each document where the stage would end soonest if the work still to place spread
  // evenly: max(the slowest rank with it, the ranks' mean with it and the rest).
  for (std::size_t d : order) {
    const double w = cost.whole.DocumentMs(lengths[d]);
    remaining -= w;
    const double slowest = schedule.Slowest();
    const auto projected = [&](double top, double t, int k, double exchange) {
      return std::max(std::max(slowest, top + t), (total + w + k * exchange + remaining) / cp);
    };
    // No place ends sooner than the slowest rank so far or the mean with no exchange: a
    // short document that fits there whole is placed without trying wider ones.
    const double floor = std::max(slowest, (total + w + remaining) / cp);
    if (least_widths) {
      // Each document over the fewest ranks that hold it (the least exchange), where it
      // ends soonest: documents tile the ranks as dynamic cp's groups do.
      const int k = cost.MinWidth(lengths[d]);
      if (k > cost.cp) return false;
      const auto ends = [](double top, double t, int, double) { return top + t; };
      if (!schedule.Best(d, k, k, ends, 0.0, place)) return false;
    } else if (!schedule.Best(d, 1, max_width, projected, floor, place)) {
      return false;
    }
    schedule.Put(d, place);
    widest = std::max(widest, static_cast<int>(place.ranks.size()));
    total += place.time * static_cast<double>(place.ranks.size());
  }
  // Moves: a document of the slowest rank to its best place given all the others, while
  // that lowers the slowest rank's time (each move lowers it, so this ends; 4n moves at most
  // keep it cheap).
  for (std::size_t moves = 0; moves < 4 * n; ++moves) {
    const int slowest_rank = schedule.SlowestRank();
    const double slowest = schedule.Slowest();
    bool moved = false;
    for (std::size_t d : order) {
      const std::span<const int> ranks = schedule.Ranks(d);
      if (std::find(ranks.begin(), ranks.end(), slowest_rank) == ranks.end()) continue;
      schedule.Take(d, old);
      const double rest = schedule.Slowest();
      const auto peak = [&](double top, double t, int, double) { return std::max(rest, top + t); };
      if (schedule.Best(d, 1, max_width, peak, rest, place) && place.key < slowest * (1 - 1e-12)) {
        schedule.Put(d, place);
        widest = std::max(widest, static_cast<int>(place.ranks.size()));
        moved = true;
        break;
      }
      schedule.Put(d, old);
    }
    if (!moved) break;
  }
  layout.Clear();
  for (std::size_t d = 0; d < n; ++d) layout.Add(schedule.Ranks(d));
  return true;
}

// The least time any layout of the micro-batch can take on one stage: c plus the larger of
// the ranks' mean load (each document's balanced share, and for one no rank holds whole the
// least exchange it must pay) and the costliest document's floor.
double LeastLaidOutMs(std::span<const std::int64_t> lengths, const ShardCost& cost) {
  double work = 0, floor = 0;
  for (std::int64_t s : lengths) {
    work += cost.whole.DocumentMs(s);
    if (!cost.FitsRank(static_cast<double>(s))) {
      work += cost.LeastExchangeWorkMs(s, cost.MinWidth(s));
    }
    floor = std::max(floor, cost.FloorDocumentMs(s));
  }
  return cost.whole.c_ms + std::max(work / cost.cp, floor);
}

}  // namespace

ShardCost MakeShardCost(int cp, const TimeModel& whole, std::int64_t capacity_tokens,
                        double kv_ms_per_token, double kv_memory_ratio,
                        const CpTopology& topology) {
  ShardCost c;
  c.cp = cp;
  c.whole = whole;
  c.kv_ms_per_token = kv_ms_per_token;
  c.kv_memory_ratio = kv_memory_ratio;
  c.rank_capacity_tokens = c.ShardedMemoryTokens(capacity_tokens);
  c.ranks_per_node = topology.ranks_per_node <= 0 || topology.ranks_per_node >= cp
                         ? std::max(cp, 1)
                         : topology.ranks_per_node;
  // kv_ms_per_token is the exchange over all cp ranks on the group's own link.
  const double unit = cp > 1 ? kv_ms_per_token * cp / (cp - 1) : 0.0;
  if (c.ranks_per_node >= cp) {
    c.kv_unit_intra_ms_per_token = c.kv_unit_inter_ms_per_token = unit;
  } else {
    c.kv_unit_inter_ms_per_token = unit;
    c.kv_unit_intra_ms_per_token = unit * std::clamp(topology.intra_over_inter, 0.0, 1.0);
  }
  return c;
}

CpLayout LayOutMicroBatch(std::span<const std::int64_t> lengths, const ShardCost& cost) {
  if (cost.cp <= 1) return {};
  const std::size_t n = lengths.size();
  if (cost.space == CpLayoutSpace::kEveryRank) return CpLayout::EveryRank(n, cost.cp);
  thread_local std::vector<std::size_t> order;  // scratch: no allocation per call
  order.resize(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  // Longest first, ties in micro-batch order (a stable order without stable_sort's buffer).
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return lengths[x] != lengths[y] ? lengths[x] > lengths[y] : x < y;
  });
  thread_local WholeOrEvery two_way;
  const double two_way_ms = BestWholeOrEvery(lengths, cost, order, two_way);
  CpLayout best;
  ToCpLayout(two_way, cost.cp, best);
  if (cost.space != CpLayoutSpace::kAnySubset) return best;
  // The list schedule with widths up to cp, then up to half as many, and so on down to 2:
  // it places one document at a time, and a narrower cap lets long documents tile the ranks
  // where the widest first choice would leave the next one no good place. A layout within
  // kCloseEnough of the least any layout can take is kept as it is.
  constexpr double kCloseEnough = 1e-3;
  const double good_enough = LeastLaidOutMs(lengths, cost) * (1 + kCloseEnough);
  double best_ms = two_way_ms;
  thread_local CpLayout listed;
  int widest = cost.cp;
  for (int max_width = cost.cp; best_ms > good_enough; max_width = (max_width + 1) / 2) {
    // A cap no narrower than every place the last run chose would repeat that run.
    const bool repeats = max_width < cost.cp && widest <= max_width;
    // The schedule places a document only where every one of its ranks has room for it.
    if (!repeats &&
        ListScheduleOverWidths(lengths, cost, order, max_width, false, listed, widest)) {
      const double ms = LaidOutStageMs(lengths, listed, cost);
      if (ms < best_ms) {
        best_ms = ms;
        best = listed;
      }
    }
    if (max_width <= 2) break;
  }
  if (best_ms > good_enough &&
      ListScheduleOverWidths(lengths, cost, order, cost.cp, true, listed, widest)) {
    const double ms = LaidOutStageMs(lengths, listed, cost);
    if (ms < best_ms) {
      best_ms = ms;
      best = listed;
    }
  }
  return best;
}

double LaidOutStageMs(std::span<const std::int64_t> lengths, const CpLayout& layout,
                      const ShardCost& cost) {
  if (layout.empty()) {
    double t = cost.whole.c_ms;
    for (std::int64_t s : lengths) t += cost.whole.DocumentMs(s);
    return t;
  }
  thread_local std::vector<double> load;  // scratch: no allocation per call
  load.assign(static_cast<std::size_t>(cost.cp), 0.0);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::span<const int> ranks = layout.Ranks(i);
    if (ranks.size() == 1) {
      load.at(static_cast<std::size_t>(ranks[0])) += cost.whole.DocumentMs(lengths[i]);
      continue;
    }
    const int k = static_cast<int>(ranks.size());
    // Over every rank, the profile's own figure (bit for bit the two-way rule's sums).
    const double t = k == cost.cp ? cost.ShardedDocumentMs(lengths[i])
                                  : cost.DocumentMs(lengths[i], k, cost.IntraNode(ranks));
    for (int r : ranks) load.at(static_cast<std::size_t>(r)) += t;
  }
  return cost.whole.c_ms + *std::max_element(load.begin(), load.end());
}

std::vector<double> RankMemoryTokens(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                     const ShardCost& cost) {
  std::vector<double> memory(static_cast<std::size_t>(std::max(cost.cp, 1)), 0.0);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (layout.empty()) {
      memory[0] += static_cast<double>(lengths[i]);
      continue;
    }
    const std::span<const int> ranks = layout.Ranks(i);
    const int k = static_cast<int>(ranks.size());
    const double m = k == 1 ? static_cast<double>(lengths[i]) : cost.MemoryTokens(lengths[i], k);
    for (int r : ranks) memory.at(static_cast<std::size_t>(r)) += m;
  }
  return memory;
}

}  // namespace hydraulis
