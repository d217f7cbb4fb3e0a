#include "hydraulis/assign/problem.h"

#include <algorithm>
#include <array>
#include <bit>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hydraulis/base/word_hash.h"
#include "hydraulis/cost/capacity.h"

namespace hydraulis {
std::vector<std::int64_t> MicroBatchLengths(std::span<const std::int64_t> lengths,
                                            const std::vector<int>& micro_batch) {
  std::vector<std::int64_t> out;
  out.reserve(micro_batch.size());
  for (int d : micro_batch) out.push_back(lengths[static_cast<std::size_t>(d)]);
  return out;
}

namespace {

// Searches and bounds sum the balanced share (PipelineModel::time); MicroBatchMs lays out.
PipelineModel ModelOf(const Scheme& scheme, std::int64_t capacity_tokens, const ShardCost& shard) {
  PipelineModel m;
  m.scheme = scheme;
  m.capacity_tokens = capacity_tokens;
  m.shard = shard;
  m.time = shard.Balanced();
  return m;
}

}  // namespace

PipelineModel MakePipelineModel(const Scheme& scheme, const TimeModel& whole,
                                std::int64_t capacity_tokens, double kv_ms_per_token,
                                double kv_memory_ratio) {
  return ModelOf(
      scheme, capacity_tokens,
      MakeShardCost(scheme.cp, whole, capacity_tokens, kv_ms_per_token, kv_memory_ratio));
}

PipelineModel MakePipelineModel(const Profile& profile, const SchemeProfile& entry,
                                const OptimizerLayout& layout) {
  const std::int64_t capacity = CapacityTokens(profile, entry.scheme, layout);
  return ModelOf(entry.scheme, capacity, MakeShardCost(profile, entry, capacity));
}

std::vector<std::vector<int>> GroupMembers(std::span<const PipelineModel> pipelines) {
  std::vector<std::vector<int>> members;
  for (int p = 0; p < static_cast<int>(pipelines.size()); ++p) {
    auto it = std::find_if(members.begin(), members.end(), [&](const std::vector<int>& m) {
      return pipelines[static_cast<std::size_t>(m.front())].SameAs(
          pipelines[static_cast<std::size_t>(p)]);
    });
    if (it == members.end()) {
      members.push_back({p});
    } else {
      it->push_back(p);
    }
  }
  return members;
}

std::vector<PipelineGroup> GroupPipelines(std::span<const PipelineModel> pipelines) {
  std::vector<PipelineGroup> groups;
  for (const std::vector<int>& m : GroupMembers(pipelines)) {
    groups.push_back({pipelines[static_cast<std::size_t>(m.front())], static_cast<int>(m.size())});
  }
  return groups;
}

namespace {

// The laid-out time of a cp micro-batch depends only on its lengths (in order) and the
// shard cost, and the local search re-packs the same micro-batches again and again (on a
// 1,024-GPU 128K batch 55 % of the calls repeat an earlier one). One table for the whole
// process keeps the answers, shared by every thread: the planner's threads are started
// per parallel section, and a table of their own started empty every time (planning with
// more threads got slower). It is split into kShards parts, each behind its own mutex, so
// threads seldom wait for one another. The key is the cost's fields' bits, then the
// lengths; a part is emptied when it reaches kMaxEntriesPerShard, so memory stays bounded
// (about 30 MB). A value is a function of its key, so sharing changes no result.
class LaidOutTimes {
 public:
  static LaidOutTimes& Shared() {
    static LaidOutTimes table;
    return table;
  }

  double Get(std::span<const std::int64_t> lengths, const ShardCost& cost) {
    thread_local std::vector<std::int64_t> key;  // scratch: no allocation on a hit
    key.clear();
    for (const double x : {cost.whole.a_ms_per_token2, cost.whole.b_ms_per_token, cost.whole.c_ms,
                           cost.kv_ms_per_token, cost.kv_memory_ratio, cost.rank_capacity_tokens,
                           cost.kv_unit_intra_ms_per_token, cost.kv_unit_inter_ms_per_token}) {
      key.push_back(std::bit_cast<std::int64_t>(x));
    }
    key.push_back(cost.cp);
    key.push_back(cost.ranks_per_node);
    key.push_back(static_cast<std::int64_t>(cost.space));
    key.insert(key.end(), lengths.begin(), lengths.end());
    const std::size_t hash = KeyHash{}(key);
    Shard& shard = shards_[hash % kShards];
    {
      const std::lock_guard lock(shard.mutex);
      if (auto it = shard.times.find(key); it != shard.times.end()) return it->second;
    }
    const double ms = LaidOutStageMs(lengths, LayOutMicroBatch(lengths, cost), cost);
    const std::lock_guard lock(shard.mutex);
    if (shard.times.size() >= kMaxEntriesPerShard) shard.times.clear();
    shard.times.emplace(key, ms);
    return ms;
  }

 private:
  struct KeyHash {
    std::size_t operator()(const std::vector<std::int64_t>& key) const {
      return HashWords(std::span<const std::int64_t>(key));
    }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::vector<std::int64_t>, double, KeyHash> times;
  };
  static constexpr std::size_t kShards = 64;
  static constexpr std::size_t kMaxEntriesPerShard = std::size_t{1} << 11;
  std::array<Shard, kShards> shards_;
};

}  // namespace

double PackingFloorMs(const PipelineModel& pipeline, double work_ms, std::int64_t tokens) {
  return work_ms +
         static_cast<double>((tokens + pipeline.capacity_tokens - 1) / pipeline.capacity_tokens) *
             pipeline.time.c_ms;
}

double MicroBatchMs(std::span<const std::int64_t> lengths, const PipelineModel& pipeline) {
  if (pipeline.scheme.cp > 1) {
    return LaidOutTimes::Shared().Get(lengths, pipeline.shard);
  }
  double t = pipeline.time.c_ms;
  for (std::int64_t s : lengths) t += pipeline.time.DocumentMs(s);
  return t;
}

std::vector<CpLayout> MicroBatchLayouts(std::span<const std::int64_t> lengths,
                                        const PipelineModel& pipeline,
                                        const MicroBatches& micro_batches) {
  std::vector<CpLayout> layouts;
  layouts.reserve(micro_batches.size());
  for (const auto& mb : micro_batches) {
    layouts.push_back(pipeline.scheme.cp > 1
                          ? LayOutMicroBatch(MicroBatchLengths(lengths, mb), pipeline.shard)
                          : CpLayout{});
  }
  return layouts;
}

std::vector<double> MicroBatchStageMs(std::span<const std::int64_t> lengths,
                                      const PipelineModel& pipeline,
                                      const MicroBatches& micro_batches) {
  std::vector<double> stage_ms;
  stage_ms.reserve(micro_batches.size());
  for (const auto& mb : micro_batches) {
    if (pipeline.scheme.cp > 1) {
      stage_ms.push_back(MicroBatchMs(MicroBatchLengths(lengths, mb), pipeline));
      continue;
    }
    double t = pipeline.time.c_ms;
    for (int d : mb) t += pipeline.time.DocumentMs(lengths[static_cast<std::size_t>(d)]);
    stage_ms.push_back(t);
  }
  return stage_ms;
}

double PipelineMs(const AssignProblem& problem, const PipelineModel& pipeline,
                  const MicroBatches& micro_batches) {
  return OneFOneBMs(MicroBatchStageMs(problem.lengths, pipeline, micro_batches), pipeline.scheme.pp,
                    problem.schedule);
}

void Evaluate(const AssignProblem& problem, Assignment& a) {
  a.pipeline_ms.assign(a.pipelines.size(), 0.0);
  a.step_ms = 0;
  for (std::size_t p = 0; p < a.pipelines.size(); ++p) {
    a.pipeline_ms[p] = PipelineMs(problem, problem.pipelines[p], a.pipelines[p]);
    a.step_ms = std::max(a.step_ms, a.pipeline_ms[p]);
  }
}

}  // namespace hydraulis
