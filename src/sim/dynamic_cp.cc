#include "hydraulis/sim/dynamic_cp.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/kv_exchange.h"
#include "hydraulis/cost/time_model.h"

namespace hydraulis {
namespace {

struct Sample {
  int id = 0;
  std::int64_t length = 0;
};
using Bucket = std::vector<Sample>;

// The peer's cost of a document: L^2 / cp (an exact integer square over a power of two).
double PeerCost(std::int64_t length, std::int64_t max_tokens) {
  return static_cast<double>(length * length) / DynamicCpSize(length, max_tokens);
}

// make_buckets_equal: contiguous slices of `samples` of about equal cost, one per distinct
// cp size, closed early when the rest must still fill the remaining buckets.
std::vector<Bucket> MakeBuckets(const std::vector<Sample>& samples, std::int64_t max_tokens) {
  const std::size_t n = samples.size();
  std::set<int> sizes;
  double total = 0;
  for (const Sample& s : samples) {
    sizes.insert(DynamicCpSize(s.length, max_tokens));
    total += PeerCost(s.length, max_tokens);
  }
  const auto k = static_cast<std::int64_t>(sizes.size());
  const double target = total / static_cast<double>(k);
  std::vector<Bucket> buckets;
  Bucket current;
  double current_cost = 0;
  std::int64_t remaining = k;
  for (std::size_t i = 0; i < n; ++i) {
    const double w = PeerCost(samples[i].length, max_tokens);
    if (!current.empty() && (current_cost + w > target * 1.1 ||
                             static_cast<std::int64_t>(n - i) <=
                                 remaining - static_cast<std::int64_t>(buckets.size()))) {
      buckets.push_back(std::move(current));
      current.clear();
      current_cost = 0;
      --remaining;
    }
    current.push_back(samples[i]);
    current_cost += w;
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

struct Group {
  std::vector<int> members;
  int size = 0;
};

double MaxOf(const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); }
double MinOf(const std::vector<double>& x) { return *std::min_element(x.begin(), x.end()); }

// One group of the schedule as it is built: per rank its load, its documents' lengths and
// ids, and the group that owns it (-1: free).
struct GroupRanks {
  explicit GroupRanks(std::size_t ranks)
      : load(ranks, 0.0), lengths(ranks), ids(ranks), owner(ranks, -1) {}

  int FreeRanks() const { return static_cast<int>(std::count(owner.begin(), owner.end(), -1)); }

  std::vector<double> load;
  std::vector<std::vector<std::int64_t>> lengths;
  std::vector<std::vector<int>> ids;
  std::vector<int> owner;
  std::vector<Group> groups;
};

// The members a document of cp `size` goes to: a new group on the first free ranks when
// enough are free, else the same-size group with the least load (the max over its
// members; the first on ties).
const std::vector<int>& MembersFor(GroupRanks& g, int size) {
  const std::size_t P = g.owner.size();
  if (g.FreeRanks() >= size) {
    Group opened;
    opened.size = size;
    for (std::size_t r = 0; r < P && static_cast<int>(opened.members.size()) < size; ++r) {
      if (g.owner[r] < 0) opened.members.push_back(static_cast<int>(r));
    }
    for (int r : opened.members) {
      g.owner[static_cast<std::size_t>(r)] = static_cast<int>(g.groups.size());
    }
    g.groups.push_back(std::move(opened));
    return g.groups.back().members;
  }
  const std::vector<int>* members = nullptr;
  double best = 0;
  for (const Group& group : g.groups) {
    if (group.size != size) continue;
    double group_load = 0;
    for (int r : group.members)
      group_load = std::max(group_load, g.load[static_cast<std::size_t>(r)]);
    if (members == nullptr || group_load < best) {
      best = group_load;
      members = &group.members;
    }
  }
  return *members;
}

// Takes documents from the buckets into groups, front bucket first, until none fits or,
// once a smaller cp size than the first has been placed, the ranks' loads are within 5 %.
void PlaceDocuments(std::vector<Bucket>& buckets, std::int64_t max_tokens, GroupRanks& g) {
  std::optional<int> first_size;
  bool check = false;
  while (!buckets.empty()) {
    const int free_ranks = g.FreeRanks();
    std::optional<std::size_t> pick;
    for (std::size_t b = 0; b < buckets.size() && !pick; ++b) {
      if (buckets[b].empty()) continue;
      const int size = DynamicCpSize(buckets[b].front().length, max_tokens);
      const bool open = std::any_of(g.groups.begin(), g.groups.end(),
                                    [&](const Group& group) { return group.size == size; });
      if (open || free_ranks >= size) pick = b;
    }
    if (!pick) break;
    const Sample sample = buckets[*pick].front();
    buckets[*pick].erase(buckets[*pick].begin());
    const int size = DynamicCpSize(sample.length, max_tokens);
    if (!first_size) first_size = size;
    const double c = PeerCost(sample.length, max_tokens);
    for (int r : MembersFor(g, size)) {
      const auto ri = static_cast<std::size_t>(r);
      g.lengths[ri].push_back(sample.length);
      g.load[ri] += c;
      g.ids[ri].push_back(sample.id);
    }
    while (!buckets.empty() && buckets.front().empty()) buckets.erase(buckets.begin());
    if (size < *first_size) check = true;
    if (check && !buckets.empty() && MaxOf(g.load) - MinOf(g.load) <= 0.05 * MaxOf(g.load)) break;
  }
}

// trim_overload: move the slowest rank's last document back to the leftovers while that
// narrows the spread of the ranks' loads.
void TrimOverload(std::int64_t max_tokens, GroupRanks& g, std::vector<Sample>& left) {
  while (true) {
    const double mx = MaxOf(g.load), mn = MinOf(g.load);
    if (mx - mn <= 0.05 * mx || mn == 0) break;
    const auto r0 =
        static_cast<std::size_t>(std::max_element(g.load.begin(), g.load.end()) - g.load.begin());
    const std::vector<int>& members = g.groups[static_cast<std::size_t>(g.owner[r0])].members;
    if (g.lengths[r0].size() <= 1) break;
    const std::int64_t length = g.lengths[r0].back();
    const double c = PeerCost(length, max_tokens);
    std::vector<double> projected = g.load;
    for (int r : members) projected[static_cast<std::size_t>(r)] -= c;
    if (!(MaxOf(projected) - MinOf(projected) < mx - mn)) break;
    const int id = g.ids[r0].back();
    for (int r : members) {
      const auto ri = static_cast<std::size_t>(r);
      g.lengths[ri].pop_back();
      g.ids[ri].pop_back();
      g.load[ri] -= c;
    }
    left.push_back({id, length});
  }
}

// fill_empty_gpus: double the smallest group (copying its last rank's work) until no rank
// is idle, shifting the ranks after it.
void FillEmptyRanks(int ranks, GroupRanks& g) {
  const std::size_t P = g.owner.size();
  auto idle = [&] {
    return std::any_of(g.ids.begin(), g.ids.end(),
                       [](const std::vector<int>& x) { return x.empty(); });
  };
  while (idle()) {
    if (g.groups.empty()) throw InternalError("dynamic-cp: a group placed no document");
    int smallest = g.groups.front().size;
    for (const Group& group : g.groups) smallest = std::min(smallest, group.size);
    const int grown = std::min(2 * smallest, ranks), d = grown - smallest;
    std::size_t gid = 0;
    while (g.groups[gid].size != smallest) ++gid;
    const int s = g.groups[gid].members.front(), e = g.groups[gid].members.back();
    int first_empty = 0;
    while (!g.ids[static_cast<std::size_t>(first_empty)].empty()) ++first_empty;
    std::vector<std::vector<std::int64_t>> new_lengths(P);
    std::vector<std::vector<int>> new_ids(P);
    for (int i = 0; i < s; ++i) {
      new_lengths[static_cast<std::size_t>(i)] = g.lengths[static_cast<std::size_t>(i)];
      new_ids[static_cast<std::size_t>(i)] = g.ids[static_cast<std::size_t>(i)];
    }
    for (int i = s; i <= e + d; ++i) {
      new_lengths[static_cast<std::size_t>(i)] = g.lengths[static_cast<std::size_t>(e)];
      new_ids[static_cast<std::size_t>(i)] = g.ids[static_cast<std::size_t>(e)];
    }
    for (int i = e + 1; i < first_empty; ++i) {
      new_lengths[static_cast<std::size_t>(i + d)] = g.lengths[static_cast<std::size_t>(i)];
      new_ids[static_cast<std::size_t>(i + d)] = g.ids[static_cast<std::size_t>(i)];
    }
    g.groups[gid].members.clear();
    for (int i = s; i <= e + d; ++i) g.groups[gid].members.push_back(i);
    g.groups[gid].size = grown;
    for (std::size_t later = gid + 1; later < g.groups.size(); ++later) {
      for (int& r : g.groups[later].members) r += d;
    }
    g.lengths = std::move(new_lengths);
    g.ids = std::move(new_ids);
  }
}

// next_hdp_group: one group of the schedule, and the samples left for later groups.
std::vector<std::vector<int>> NextGroup(const std::vector<Sample>& samples, int ranks,
                                        std::int64_t max_tokens, std::vector<Sample>& left) {
  std::vector<Bucket> buckets = MakeBuckets(samples, max_tokens);
  GroupRanks g(static_cast<std::size_t>(ranks));
  PlaceDocuments(buckets, max_tokens, g);
  left.clear();
  for (const Bucket& b : buckets) left.insert(left.end(), b.begin(), b.end());
  TrimOverload(max_tokens, g, left);
  FillEmptyRanks(ranks, g);
  return std::move(g.ids);
}

}  // namespace

int DynamicCpSize(std::int64_t length, std::int64_t max_tokens_per_rank) {
  int p = 1;
  while (static_cast<std::int64_t>(p) * max_tokens_per_rank < length) p *= 2;
  return p;
}

DynamicCpSchedule ScheduleDynamicCp(std::span<const std::int64_t> lengths, int ranks,
                                    std::int64_t max_tokens_per_rank) {
  if (ranks < 1) throw InvalidInput("dynamic-cp: ranks must be >= 1, got " + std::to_string(ranks));
  if (max_tokens_per_rank < 1) {
    throw InvalidInput("dynamic-cp: tokens per rank must be >= 1, got " +
                       std::to_string(max_tokens_per_rank));
  }
  std::vector<Sample> samples;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) {
      throw InvalidInput("dynamic-cp: document " + std::to_string(i) + " has length " +
                         std::to_string(lengths[i]) + "; lengths must be >= 1");
    }
    if (lengths[i] > static_cast<std::int64_t>(ranks) * max_tokens_per_rank) {
      throw InvalidInput("dynamic-cp: document " + std::to_string(i) + " of " +
                         std::to_string(lengths[i]) + " tokens needs more than the " +
                         std::to_string(ranks) + " ranks of " +
                         std::to_string(max_tokens_per_rank) + " tokens");
    }
    samples.push_back({static_cast<int>(i), lengths[i]});
  }
  std::stable_sort(samples.begin(), samples.end(),
                   [](const Sample& x, const Sample& y) { return x.length > y.length; });
  DynamicCpSchedule schedule;
  std::vector<Sample> left;
  while (!samples.empty()) {
    schedule.groups.push_back(NextGroup(samples, ranks, max_tokens_per_rank, left));
    samples.swap(left);
  }
  return schedule;
}

std::vector<int> GroupCpSizes(const std::vector<std::vector<int>>& group, std::size_t documents) {
  std::vector<int> copies(documents, 0);
  for (const auto& rank : group) {
    for (int d : rank) ++copies.at(static_cast<std::size_t>(d));
  }
  return copies;
}

std::vector<std::vector<double>> DynamicCpRankMs(const Profile& profile, const SchemeProfile& entry,
                                                 std::span<const std::int64_t> lengths,
                                                 const DynamicCpSchedule& schedule) {
  const TimeModel whole = TimeModel::From(entry);
  std::vector<std::vector<double>> out;
  for (const auto& group : schedule.groups) {
    const std::vector<int> copies = GroupCpSizes(group, lengths.size());
    std::vector<double>& times = out.emplace_back();
    for (const auto& rank : group) {
      double t = whole.c_ms;
      for (int d : rank) {
        const int k = copies[static_cast<std::size_t>(d)];
        const std::int64_t s = lengths[static_cast<std::size_t>(d)];
        t += whole.DocumentMs(s) / k + KvExchangeMsPerToken(profile.model, {k, entry.scheme.tp, 1},
                                                            profile.cluster.gpus_per_node, {}) *
                                           static_cast<double>(s);
      }
      times.push_back(t);
    }
  }
  return out;
}

double DynamicCpComputeMs(const std::vector<std::vector<double>>& rank_ms) {
  double total = 0;
  for (const auto& group : rank_ms) total += *std::max_element(group.begin(), group.end());
  return total;
}

}  // namespace hydraulis
