// The dynamic-cp baseline: Megatron-Core's dynamic (hybrid) context parallelism, tp fixed
// and a cp size per document, rendered from megatron-core 0.16.1's BalancedCPScheduler
// (megatron/core/pipeline_parallel/hybrid_cp_schedule.py) rule for rule, so that its
// schedules equal the peer's sample for sample (python/tests/test_dynamic_cp.py runs both),
// and the time of such a schedule on a profile (docs/simulator.md, "dynamic-cp").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/spec/profile.h"

namespace hydraulis {

// groups[g][r]: the documents (indices into the batch) data-parallel x context-parallel rank
// r runs in group g, in order. Groups run one after another (the peer puts a barrier
// between them); a document's cp size is the number of ranks of its group that list it.
struct DynamicCpSchedule {
  std::vector<std::vector<std::vector<int>>> groups;
};

// The peer's cp size of a document of `length` tokens: the smallest power of two p with
// p * max_tokens_per_rank >= length.
int DynamicCpSize(std::int64_t length, std::int64_t max_tokens_per_rank);

// BalancedCPScheduler.get_groups_and_subsamples on a batch of document lengths (each >= 1)
// over `ranks` dp x cp ranks whose micro-batches hold `max_tokens_per_rank` tokens.
// InvalidInput when ranks < 1, max_tokens_per_rank < 1, a length < 1, or a document needs
// more cp ranks than there are.
DynamicCpSchedule ScheduleDynamicCp(std::span<const std::int64_t> lengths, int ranks,
                                    std::int64_t max_tokens_per_rank);

// The cp size of each of the batch's `documents` in `group` (group[r]: rank r's documents):
// the number of the group's ranks that list it, 0 for a document of another group.
std::vector<int> GroupCpSizes(const std::vector<std::vector<int>>& group, std::size_t documents);

// Each rank's time in each group under `schedule` ([group][rank], ms): a rank's group is
// one micro-batch on a <1, tp, 1> stage, c plus, per document of cp size k,
// (a s^2 + b s) / k and, for k > 1, the key/value exchange of a <k, tp, 1> scheme
// (KvExchangeMsPerToken, the simulator's links). `entry` is the profile's <1, tp, 1> fit.
std::vector<std::vector<double>> DynamicCpRankMs(const Profile& profile, const SchemeProfile& entry,
                                                 std::span<const std::int64_t> lengths,
                                                 const DynamicCpSchedule& schedule);

// The compute time of one step (ms): groups run one after another (the peer's barrier), each
// as long as its slowest rank.
double DynamicCpComputeMs(const std::vector<std::vector<double>>& rank_ms);

}  // namespace hydraulis
