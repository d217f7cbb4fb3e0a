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

// A Gloo process group over all ranks of a rendezvous. Collectives are blocking and
// in place; a failed or timed-out one (a dead peer) throws Error naming the rank and the
// operation.
class CommGroup {
 public:
  // `name` keeps the keys of different groups apart in the shared store; every rank must
  // create the same groups in the same order.
  CommGroup(const Rendezvous& rendezvous, const std::string& name);
  ~CommGroup();
  CommGroup(const CommGroup&) = delete;
  CommGroup& operator=(const CommGroup&) = delete;

  int rank() const;
  int size() const;

  // Sums `tensor` (contiguous CPU) over the ranks, in place; every rank gets the same bits.
  void AllReduceSum(const at::Tensor& tensor);
  void Barrier();

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
