// The ranks of a distributed profile run (`hydraulis profile --nproc N` or under torchrun)
// and their communication groups: for each profiled tp degree, the world is cut into blocks
// of tp consecutive ranks, as a strategy of identical tp pipelines places them, and every
// full block times that degree's schemes at the same time (ranks share the machine's cores
// and memory bandwidth in training, so they must when profiled). A <cp, tp, 1> scheme's
// blocks are cp * tp consecutive ranks laid out as training lays out a stage (cp rank
// major, tp rank minor: placement.h), each with its cp and tp groups.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <utility>

#include "hydraulis/runtime/communication/comm_group.h"

namespace hydraulis {

class ProfileRanks {
 public:
  // Joins the job of `options` and creates this rank's groups: a world group, then, in
  // increasing tp, its block's group for every degree > 1 of `tps` whose full blocks
  // include it (every rank follows that one order, so creation cannot deadlock).
  // InvalidInput when the world is smaller than the largest degree.
  // Then, in increasing (cp, tp), the groups of every <cp, tp, 1> of `cp_tps` (cp >= 2)
  // whose full blocks of cp * tp ranks include it.
  ProfileRanks(const DistributedOptions& options, const std::set<int>& tps,
               const std::set<std::pair<int, int>>& cp_tps = {});
  ~ProfileRanks();
  ProfileRanks(const ProfileRanks&) = delete;
  ProfileRanks& operator=(const ProfileRanks&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // Whether this rank lies in a full block of `tp` ranks and so times that degree.
  bool Runs(int tp) const { return rank_ < world_size_ / tp * tp; }
  // Its block's group for degree `tp`; nullptr for tp 1. InternalError unless Runs(tp) and
  // tp was among the degrees given.
  CommGroup* TensorParallelGroup(int tp) const;
  // The groups of this rank's block for <cp, tp, 1>: the whole block, its cp group (the
  // block's ranks of this tp rank) and its tp group (of this cp rank; nullptr for tp 1).
  // InternalError unless Runs(cp * tp) and (cp, tp) was among those given.
  struct ContextParallelGroups {
    CommGroup* block = nullptr;
    CommGroup* cp = nullptr;
    CommGroup* tp = nullptr;
  };
  ContextParallelGroups ContextParallelBlock(int cp, int tp) const;
  // Waits for every rank.
  void Barrier();

 private:
  int rank_ = 0;
  int world_size_ = 1;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<CommGroup> world_;
  std::map<int, std::unique_ptr<CommGroup>> tp_groups_;
  struct OwnedContextParallelGroups {
    std::unique_ptr<CommGroup> block, cp, tp;  // cp is block's when tp = 1: left empty
  };
  std::map<std::pair<int, int>, OwnedContextParallelGroups> cp_groups_;
};

}  // namespace hydraulis
