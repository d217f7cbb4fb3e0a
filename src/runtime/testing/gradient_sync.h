// How the ranks of a data-parallel group combine the gradients of one step, for the
// single-process ReferenceTrainer run on every rank of a data-parallel group
// (reference_trainer.h). Test support: the runtime itself reduces through ShardedAdamW.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace hydraulis {

class CommGroup;

// How the ranks of a data-parallel group combine one step. The trainer calls, in order:
// SumAcrossRanks({local target count}) before any backward (every rank must divide by the
// global count), ReduceGradients after this rank's backward passes, SumAcrossRanks({local
// loss sum}) for the report. Every rank of the group must make the same calls in the same
// order, also a rank with no micro-batch. AllReduceGradientSync (below) implements it; the
// distributed trainer does not use it: its ZeRO-1 optimizer (sharded_optimizer.h)
// reduce-scatters the gradients itself.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Element-wise sum over the group's ranks (exact for integers up to 2^53).
  virtual std::vector<double> SumAcrossRanks(const std::vector<double>& local) = 0;
  // Replaces every parameter's gradient (defined on every rank) by its sum over the ranks.
  virtual void ReduceGradients(const std::vector<at::Tensor>& parameters) = 0;
};

// GradientSync by one all-reduce of all gradients flattened into one buffer (one
// collective per step instead of one per parameter). `group` must outlive it.
class AllReduceGradientSync : public GradientSync {
 public:
  explicit AllReduceGradientSync(CommGroup& group) : group_(group) {}

  std::vector<double> SumAcrossRanks(const std::vector<double>& local) override;
  void ReduceGradients(const std::vector<at::Tensor>& parameters) override;

 private:
  CommGroup& group_;
};

}  // namespace hydraulis
