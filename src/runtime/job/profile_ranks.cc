#include "profile_ranks.h"

#include <algorithm>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/spec/placement.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

ProfileRanks::ProfileRanks(const DistributedOptions& options, const std::set<int>& tps,
                           const std::set<std::pair<int, int>>& cp_tps)
    : rank_(options.rank), world_size_(options.world_size) {
  int max_tp = tps.empty() ? 1 : *tps.rbegin();
  for (const auto& [cp, tp] : cp_tps) max_tp = std::max(max_tp, cp * tp);
  if (world_size_ < max_tp) {
    throw InvalidInput("profile: WORLD_SIZE " + std::to_string(world_size_) +
                       " ranks cannot run tp = " + std::to_string(max_tp));
  }
  rendezvous_ = std::make_unique<Rendezvous>(options);
  world_ = MakeCommGroup(*rendezvous_, "profile-world");
  for (const int tp : tps) {
    if (tp == 1 || !Runs(tp)) continue;
    Strategy blocks;  // world / tp pipelines of tp ranks
    Scheme scheme;
    scheme.tp = tp;
    blocks.pipelines.assign(static_cast<std::size_t>(world_size_ / tp), scheme);
    const int block =
        ComputePlacement(blocks, world_size_)[static_cast<std::size_t>(rank_)].pipeline;
    tp_groups_[tp] =
        MakeCommGroup(*rendezvous_, "profile-tp" + std::to_string(tp) + "-" + std::to_string(block),
                      TensorParallelGpus(blocks, block, 0));
  }
  for (const auto& [cp, tp] : cp_tps) {
    if (cp < 2 || !Runs(cp * tp)) continue;
    Strategy blocks;  // world / (cp * tp) single-stage pipelines of cp x tp ranks
    Scheme scheme;
    scheme.cp = cp;
    scheme.tp = tp;
    blocks.pipelines.assign(static_cast<std::size_t>(world_size_ / (cp * tp)), scheme);
    const ComputeRole at = ComputePlacement(blocks, world_size_)[static_cast<std::size_t>(rank_)];
    const std::string name = "profile-cp" + std::to_string(cp) + "tp" + std::to_string(tp) + "-" +
                             std::to_string(at.pipeline);
    OwnedContextParallelGroups& g = cp_groups_[{cp, tp}];
    g.block = MakeCommGroup(*rendezvous_, name, PipelineGpus(blocks, at.pipeline));
    if (tp > 1) {
      // Every rank creates its own two groups; ranks of one group name the same members.
      g.cp = MakeCommGroup(*rendezvous_, name + "-cp" + std::to_string(at.block.tp_rank),
                           ContextParallelGpus(blocks, at.pipeline, 0, at.block.tp_rank));
      g.tp = MakeCommGroup(*rendezvous_, name + "-tp" + std::to_string(at.cp_rank),
                           TensorParallelGpus(blocks, at.pipeline, 0, at.cp_rank));
    }
  }
}

ProfileRanks::ContextParallelGroups ProfileRanks::ContextParallelBlock(int cp, int tp) const {
  const auto it = cp_groups_.find({cp, tp});
  if (it == cp_groups_.end()) {
    throw InternalError("profile: rank " + std::to_string(rank_) + " has no cp " +
                        std::to_string(cp) + " x tp " + std::to_string(tp) + " block");
  }
  const OwnedContextParallelGroups& g = it->second;
  return {g.block.get(), g.cp ? g.cp.get() : g.block.get(), g.tp.get()};
}

ProfileRanks::~ProfileRanks() = default;

CommGroup* ProfileRanks::TensorParallelGroup(int tp) const {
  if (tp == 1) return nullptr;
  const auto it = tp_groups_.find(tp);
  if (it == tp_groups_.end()) {
    throw InternalError("profile: rank " + std::to_string(rank_) + " has no tp " +
                        std::to_string(tp) + " group");
  }
  return it->second.get();
}

void ProfileRanks::Barrier() { world_->Barrier(); }

}  // namespace hydraulis
