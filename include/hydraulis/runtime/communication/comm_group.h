// Communication for the runtime: a TCPStore rendezvous and the CommGroup interface with
// its c10d (Gloo, NCCL) and in-process fake implementations, so that c10d headers and
// their libtorch-version differences (torch_compat.h) stay out of the public API.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hydraulis {

// Which c10d backend a rendezvous' groups use: Gloo (CPU tensors; CUDA tensors are staged
// through host memory) or NCCL (CUDA tensors; CPU tensors are staged through the rank's
// GPU). NCCL needs one GPU per rank: DistributedOptions::device_index.
enum class CommBackend { kGloo, kNccl };
std::string ToString(CommBackend backend);
// The backend named `text` ("gloo", "nccl"); InvalidInput naming `what` otherwise.
CommBackend ParseCommBackend(const std::string& text, const std::string& what);

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
  // The backend of every group of the job, and this rank's GPU for NCCL (LOCAL_RANK).
  CommBackend backend = CommBackend::kGloo;
  int device_index = 0;
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

// An asynchronous operation in flight (CommGroup::ReduceScatterSumAsync, RecvAsync). Wait
// blocks until it completed (Error as the blocking calls); the destructor of an unwaited one
// waits quietly, except while an exception unwinds the stack: then it does not wait (the
// peer may never complete the transfer) and keeps the buffers alive instead.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void Wait() = 0;
};

// The collectives and point-to-point transfers the runtime uses, over some ranks of a job,
// behind one interface with three implementations: c10d Gloo and NCCL (MakeCommGroup) and
// an in-process fake (FakeCommWorld) that lets tests drive tensor-parallel, pipeline and
// optimizer logic from threads. Calls block until their result is in place; a failed or
// timed-out call (a dead or stuck peer) throws Error naming the rank, group and operation.
// Every member must make the same calls in the same order.
class CommGroup {
 public:
  virtual ~CommGroup() = default;

  // This rank's index in the group and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The global ranks of the group, in group-rank order.
  virtual const std::vector<int>& members() const = 0;
  virtual const std::string& name() const = 0;

  // Sums `tensor` (contiguous) over the ranks, in place; every rank gets the same bits.
  virtual void AllReduceSum(const at::Tensor& tensor) = 0;
  // Element-wise maximum and minimum, in place (used for the plan-hash check).
  virtual void AllReduceMax(const at::Tensor& tensor) = 0;
  virtual void AllReduceMin(const at::Tensor& tensor) = 0;
  // `full` (contiguous, size() * n elements) summed over the ranks; this rank receives
  // chunk rank() of the sum in `shard` (contiguous, n elements).
  void ReduceScatterSum(const at::Tensor& full, const at::Tensor& shard) {
    ReduceScatterSumAsync(full, shard)->Wait();
  }
  // The same, started and returned at once: `shard` holds the result after Wait, and
  // neither tensor may change until then. Every member must issue the same asynchronous
  // collectives in the same order; they may wait for them in any order.
  virtual std::unique_ptr<CommWork> ReduceScatterSumAsync(const at::Tensor& full,
                                                          const at::Tensor& shard) = 0;
  // Concatenates every rank's `shard` (contiguous, the same size on every rank) into
  // `full` (contiguous, size() times as many elements), in group-rank order.
  void AllGather(const at::Tensor& shard, const at::Tensor& full) {
    AllGatherAsync(shard, full)->Wait();
  }
  // The same, started and returned at once: `full` holds the result after Wait, and neither
  // tensor may change until then. Members issue asynchronous collectives in one order but
  // may wait for them in any order.
  virtual std::unique_ptr<CommWork> AllGatherAsync(const at::Tensor& shard,
                                                   const at::Tensor& full) = 0;
  virtual void Barrier() = 0;

  // Point-to-point, for pipeline stages; `peer` is a group rank. Send does not block: the
  // tensor is kept alive and the transfer completes in the background; WaitSends waits for
  // all of them (before the step ends). RecvAsync posts a receive into `tensor`
  // (contiguous, of the sent size) and returns at once; the tensor holds the message after
  // Wait and must not be touched before. Recv posts and waits.
  // Matching: Gloo matches a pair's messages by `tag`, but NCCL has no tags: it runs the
  // operations between two ranks one after another in the order each side issued them
  // (c10d gives every pair its own communicator and stream for unbatched point-to-point
  // operations), so two ranks must issue their sends and receives to each other in the
  // same order, or a send waits behind a receive its peer issues after its own send (a
  // deadlock once a message outgrows NCCL's buffers). The fake enforces that rule and
  // reports a violation at once (pipeline_stage.h says how the 1F1B schedule meets it).
  virtual void Send(const at::Tensor& tensor, int peer, int tag) = 0;
  virtual std::unique_ptr<CommWork> RecvAsync(const at::Tensor& tensor, int peer, int tag) = 0;
  void Recv(const at::Tensor& tensor, int peer, int tag) { RecvAsync(tensor, peer, tag)->Wait(); }
  virtual void WaitSends() = 0;
};

// A c10d group of the rendezvous' backend over the given global ranks (distinct, each in
// [0, world_size), this rank among them; empty: all ranks); group rank i is members[i].
// `name` keeps the keys of different groups apart in the shared store. Every member must
// create the group, and every rank must create the groups it belongs to in one global
// order (creation waits for all members). InvalidInput on bad members. `backend` overrides
// the rendezvous' backend: a Gloo group beside NCCL ones carries small host-side control
// messages without queueing them behind the GPU collectives in flight.
std::unique_ptr<CommGroup> MakeCommGroup(const Rendezvous& rendezvous, const std::string& name,
                                         std::vector<int> members = {},
                                         std::optional<CommBackend> backend = std::nullopt);

// An in-process job of `world_size` ranks, each a thread of this process. Group(rank,
// ...) is rank `rank`'s handle on a group; collectives combine the members' tensors in
// group-rank order, so results are deterministic and bit-identical on every member. A
// call that waits longer than `timeout` for its peers throws Error.
class FakeCommWorld {
 public:
  explicit FakeCommWorld(int world_size,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~FakeCommWorld();
  FakeCommWorld(const FakeCommWorld&) = delete;
  FakeCommWorld& operator=(const FakeCommWorld&) = delete;

  int world_size() const;
  // This world (which must outlive it) seen from global rank `rank`; members as in
  // MakeCommGroup. Groups are identified by `name`: every member passes the same one.
  std::unique_ptr<CommGroup> Group(int rank, const std::string& name,
                                   std::vector<int> members = {});

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace hydraulis
