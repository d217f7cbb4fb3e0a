#include "hydraulis/runtime/job/profile_ranks.h"

#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/spec/placement.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

ProfileRanks::ProfileRanks(const DistributedOptions& options, const std::set<int>& tps)
    : rank_(options.rank), world_size_(options.world_size) {
  const int max_tp = tps.empty() ? 1 : *tps.rbegin();
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
