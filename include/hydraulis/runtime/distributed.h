// c10d process groups for the runtime: a TCPStore rendezvous and ProcessGroupGloo over it
// (CPU), behind small hydraulis classes so that c10d headers and their libtorch-version
// differences (torch_compat.h) stay out of the public API. Data parallelism: every rank
// holds a full model replica and AllReduceGradientSync sums the gradients over the ranks.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hydraulis/runtime/trainer.h"

namespace hydraulis {

// Where and how this rank joins the job. Built by the CLI or a test (possibly from the
// torchrun environment, DistributedOptionsFromEnvironment) and passed down; nothing below
// reads the environment.
struct DistributedOptions {
  int rank = 0;        // in [0, world_size)
  int world_size = 1;  // >= 1
  // The TCPStore rendezvous: rank 0 serves it on master_port, every rank connects to it.
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // in [1, 65535]
  // Address this rank's Gloo transport binds to. Empty: master_addr when that is a loopback
  // address (a job on one machine), otherwise the address this host's name resolves to.
  std::string bind_addr;
  // Bounds the rendezvous and every collective: a rank that died or never came makes the
  // others fail with an Error after this long at most, never hang.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

// InvalidInput naming the field when an option is out of range.
void ValidateDistributedOptions(const DistributedOptions& options);

// The torchrun / Slurm-launcher convention: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (all
// required). Only for the edges (CLI, tests); InvalidInput naming the variable when one is
// missing or malformed. The timeout and bind address keep their defaults.
DistributedOptions DistributedOptionsFromEnvironment();

// The store all of a job's groups rendezvous through. Rank 0 hosts it; the constructor
// returns once all world_size ranks have connected (Error after options.timeout).
class Rendezvous {
 public:
  explicit Rendezvous(const DistributedOptions& options);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const DistributedOptions& options() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// A Gloo process group over some ranks of a rendezvous (all of them by default).
// Collectives are blocking and in place; a failed or timed-out one (a dead peer) throws
// Error naming the rank, the group and the operation.
class CommGroup {
 public:
  // `name` keeps the keys of different groups apart in the shared store. Every member must
  // create the group, and every rank must create the groups it belongs to in one global
  // order (group creation waits for all members, so two ranks creating two shared groups in
  // opposite orders would wait for each other until the timeout).
  CommGroup(const Rendezvous& rendezvous, const std::string& name);
  // A group of the given global ranks (distinct, each in [0, world_size)), this rank among
  // them; group rank i is members[i]. InvalidInput otherwise.
  CommGroup(const Rendezvous& rendezvous, const std::string& name, std::vector<int> members);
  ~CommGroup();
  CommGroup(const CommGroup&) = delete;
  CommGroup& operator=(const CommGroup&) = delete;

  // This rank's index in the group and the group's size.
  int rank() const;
  int size() const;
  // The global ranks of the group, in group-rank order.
  const std::vector<int>& members() const;
  const std::string& name() const;

  // Sums `tensor` (contiguous CPU) over the ranks, in place; every rank gets the same bits.
  void AllReduceSum(const at::Tensor& tensor);
  // Element-wise maximum and minimum, in place (used for the plan-hash check).
  void AllReduceMax(const at::Tensor& tensor);
  void AllReduceMin(const at::Tensor& tensor);
  // Concatenates every rank's `shard` (contiguous CPU, the same size on every rank) into
  // `full` (contiguous, size() times as many elements), in group-rank order.
  void AllGather(const at::Tensor& shard, const at::Tensor& full);
  void Barrier();

  // Point-to-point, for pipeline stages. Send does not block: the tensor is kept alive and
  // the transfer completes in the background, so a 1F1B schedule whose receives are
  // matched in order cannot deadlock on sends; WaitSends waits for all of them (before the
  // step ends). Recv blocks until `tensor` (contiguous, of the sent size) is filled.
  // `peer` is a group rank; messages between two ranks are matched by `tag`.
  void Send(const at::Tensor& tensor, int peer, int tag);
  void Recv(const at::Tensor& tensor, int peer, int tag);
  void WaitSends();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
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
