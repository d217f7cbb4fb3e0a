#include "bpe_merges.h"

#include <queue>

namespace hydraulis::data_internal {

void BpeMerges::Add(std::int32_t left, std::int32_t right, std::uint32_t rank,
                    std::int32_t merged) {
  merges_[Key(left, right)] = Merge{rank, merged};
}

const BpeMerges::Merge* BpeMerges::Find(std::int32_t left, std::int32_t right) const {
  const auto it = merges_.find(Key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeMerges::MergeWord(std::vector<std::int32_t>& word) const {
  const std::size_t n = word.size();
  if (n < 2) return;
  // A doubly linked list over the positions; a merged-away position is dead.
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::size_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == n ? kNone : i + 1;
  }
  struct Candidate {
    std::uint32_t rank;
    std::size_t pos;
    std::int32_t merged;
    // The queue's top is the lowest rank, then the lowest position.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(storage));
  for (std::size_t i = 0; i + 1 < n; ++i) {
    if (const Merge* m = Find(word[i], word[i + 1])) queue.push({m->rank, i, m->merged});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const std::size_t pos = top.pos;
    if (!alive[pos] || next[pos] == kNone) continue;
    const std::size_t right = next[pos];
    // An entry is stale when either side changed since it was queued.
    const Merge* current = Find(word[pos], word[right]);
    if (current == nullptr || current->merged != top.merged) continue;
    word[pos] = top.merged;
    alive[right] = false;
    next[pos] = next[right];
    if (next[right] != kNone) prev[next[right]] = pos;
    if (prev[pos] != kNone) {
      if (const Merge* m = Find(word[prev[pos]], word[pos])) {
        queue.push({m->rank, prev[pos], m->merged});
      }
    }
    if (next[pos] != kNone) {
      if (const Merge* m = Find(word[pos], word[next[pos]])) queue.push({m->rank, pos, m->merged});
    }
  }
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (alive[i]) word[out++] = word[i];
  }
  word.resize(out);
}

}  // namespace hydraulis::data_internal
