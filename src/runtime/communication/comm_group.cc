#include "hydraulis/runtime/communication/comm_group.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/base/enum_names.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/peer_lost.h"
#include "runtime/communication/torch_compat.h"

namespace hydraulis {

void ValidateDistributedOptions(const DistributedOptions& o) {
  auto fail = [](const std::string& field, const std::string& why) {
    throw InvalidInput("distributed options: " + field + ": " + why);
  };
  if (o.world_size < 1) fail("world_size", "must be >= 1, got " + std::to_string(o.world_size));
  if (o.rank < 0 || o.rank >= o.world_size) {
    fail("rank",
         "must be in [0, " + std::to_string(o.world_size) + "), got " + std::to_string(o.rank));
  }
  if (o.master_addr.empty()) fail("master_addr", "must not be empty");
  if (o.master_port < 1 || o.master_port > 65535) {
    fail("master_port", "must be in [1, 65535], got " + std::to_string(o.master_port));
  }
  if (o.timeout.count() <= 0) {
    fail("timeout", "must be > 0 ms, got " + std::to_string(o.timeout.count()));
  }
}

namespace {

const char kEnvHint[] =
    " (set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as torchrun does, or use the "
    "launcher)";

std::string RequiredEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw InvalidInput(std::string("environment: ") + name + " is not set" + kEnvHint);
  }
  return value;
}

int IntEnv(const char* name) {
  const std::string text = RequiredEnv(name);
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || value < INT32_MIN || value > INT32_MAX) {
    throw InvalidInput(std::string("environment: ") + name + ": expected an integer, got " +
                       QuoteForMessage(text));
  }
  return static_cast<int>(value);
}

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

std::string Where(const DistributedOptions& o) {
  return "rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size);
}

}  // namespace

DistributedOptions DistributedOptionsFromEnvironment() {
  DistributedOptions o;
  o.rank = IntEnv("RANK");
  o.world_size = IntEnv("WORLD_SIZE");
  o.master_addr = RequiredEnv("MASTER_ADDR");
  o.master_port = IntEnv("MASTER_PORT");
  ValidateDistributedOptions(o);
  return o;
}

struct Rendezvous::Impl {
  DistributedOptions options;
  c10::intrusive_ptr<c10d::Store> store;
};

Rendezvous::Rendezvous(const DistributedOptions& options) {
  ValidateDistributedOptions(options);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = torch_compat::MakeTcpStore(
        options.master_addr, static_cast<std::uint16_t>(options.master_port), options.rank == 0,
        static_cast<std::size_t>(options.world_size), options.timeout);
  } catch (const std::exception& e) {
    throw IoError(Where(options) + ": rendezvous at " + options.master_addr + ":" +
                  std::to_string(options.master_port) + " failed within " +
                  std::to_string(options.timeout.count()) +
                  " ms (is the port free on rank 0, and did every rank start?): " + e.what());
  }
  impl_ = std::make_unique<Impl>(Impl{options, std::move(store)});
}

Rendezvous::~Rendezvous() = default;

const DistributedOptions& Rendezvous::options() const { return impl_->options; }

namespace {
constexpr EnumNames<CommBackend, 2> kCommBackendNames{
    {{CommBackend::kGloo, "gloo"}, {CommBackend::kNccl, "nccl"}}};
}  // namespace

std::string ToString(CommBackend backend) {
  return std::string(NameOf(backend, kCommBackendNames));
}

CommBackend ParseCommBackend(const std::string& text, const std::string& what) {
  return ParseName(text, kCommBackendNames, what);
}

namespace {

std::vector<int> AllRanks(int world_size) {
  std::vector<int> all;
  for (int r = 0; r < world_size; ++r) all.push_back(r);
  return all;
}

// This rank's index in `members` after checking them; InvalidInput on a bad list.
int GroupRankOf(const std::string& name, const std::vector<int>& members, int rank,
                int world_size) {
  int group_rank = -1;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m < 0 || m >= world_size) {
      throw InvalidInput("group '" + name + "': member " + std::to_string(m) +
                         " is not a rank of a world of " + std::to_string(world_size));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (members[j] == m) {
        throw InvalidInput("group '" + name + "': rank " + std::to_string(m) + " listed twice");
      }
    }
    if (m == rank) group_rank = static_cast<int>(i);
  }
  if (group_rank < 0) {
    throw InvalidInput("group '" + name + "': rank " + std::to_string(rank) + " is not a member");
  }
  return group_rank;
}

void CheckContiguous(const at::Tensor& t, const char* what) {
  if (!t.defined() || !t.is_contiguous()) {
    throw InternalError(std::string("CommGroup: ") + what + " needs a contiguous tensor");
  }
}

// A c10d backend (Gloo or NCCL) behind CommGroup. Tensors on another device than the
// backend's (CUDA under Gloo, CPU under NCCL: small control messages) are staged through a
// copy on the backend's device.
class C10dCommGroup final : public CommGroup {
 public:
  C10dCommGroup(const DistributedOptions& options, std::string name, std::vector<int> members,
                int group_rank, c10::intrusive_ptr<torch_compat::Backend> backend,
                at::Device device)
      : options_(options),
        name_(std::move(name)),
        members_(std::move(members)),
        group_rank_(group_rank),
        backend_(std::move(backend)),
        device_(device) {}

  ~C10dCommGroup() override {
    // A send still in flight reads from a tensor this object keeps alive; finish it quietly
    // (the error, if any, was or will be reported by the peer's receive).
    for (auto& send : sends_) {
      try {
        send.work->wait();
      } catch (const std::exception&) {
      }
    }
  }

  int rank() const override { return group_rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const override { return members_; }
  const std::string& name() const override { return name_; }

  void AllReduceSum(const at::Tensor& t) override { AllReduce(t, c10d::ReduceOp::SUM, "sum"); }
  void AllReduceMax(const at::Tensor& t) override { AllReduce(t, c10d::ReduceOp::MAX, "max"); }
  void AllReduceMin(const at::Tensor& t) override { AllReduce(t, c10d::ReduceOp::MIN, "min"); }

  std::unique_ptr<CommWork> ReduceScatterSumAsync(const at::Tensor& full,
                                                  const at::Tensor& shard) override {
    CheckContiguous(full, "reduce-scatter");
    CheckContiguous(shard, "reduce-scatter");
    if (full.numel() != shard.numel() * size()) {
      throw InternalError("CommGroup::ReduceScatterSum: full must be size * shard");
    }
    at::Tensor in = Staged(full);
    at::Tensor out = Staged(shard);
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    const std::string what = "reduce-scatter of " + std::to_string(full.numel()) + " elements";
    c10::intrusive_ptr<torch_compat::Work> work;
    try {
      work = backend_->_reduce_scatter_base(out, in, opts);
    } catch (const std::exception& e) {
      Fail(what, e);
    }
    return std::make_unique<Pending>(this, std::move(work), in, out, shard, what);
  }

  std::unique_ptr<CommWork> AllGatherAsync(const at::Tensor& shard,
                                           const at::Tensor& full) override {
    CheckContiguous(full, "all-gather");
    CheckContiguous(shard, "all-gather");
    if (full.numel() != shard.numel() * size()) {
      throw InternalError("CommGroup::AllGather: full must be size * shard");
    }
    at::Tensor in = Staged(shard);
    at::Tensor out = Staged(full);
    std::string what = "all-gather of " + std::to_string(full.numel()) + " elements";
    c10::intrusive_ptr<torch_compat::Work> work;
    try {
      work = backend_->_allgather_base(out, in);
    } catch (const std::exception& e) {
      Fail(what, e);
    }
    return std::make_unique<Pending>(this, std::move(work), in, out, full, std::move(what));
  }

  void Barrier() override {
    // A one-element all-reduce rather than c10d's barrier, which under NCCL guesses the
    // device from the rank number. A host tensor, so the wait is the host's (HostWaits).
    AllReduce(at::zeros({1}, at::TensorOptions().dtype(at::kFloat)), c10d::ReduceOp::SUM,
              "barrier");
  }

  void Send(const at::Tensor& tensor, int peer, int tag) override {
    CheckPeer(peer, "send");
    at::Tensor t = tensor.contiguous();
    if (t.device() != device_) t = t.to(device_);
    std::vector<at::Tensor> tensors = {t};
    try {
      sends_.push_back({backend_->send(tensors, peer, tag), t});
    } catch (const std::exception& e) {
      Fail("send of " + std::to_string(t.numel()) + " elements to group rank " +
               std::to_string(peer),
           e);
    }
  }

  std::unique_ptr<CommWork> RecvAsync(const at::Tensor& tensor, int peer, int tag) override {
    CheckPeer(peer, "receive");
    CheckContiguous(tensor, "receive");
    at::Tensor t = Staged(tensor);
    std::vector<at::Tensor> tensors = {t};
    std::string what = "receive of " + std::to_string(tensor.numel()) +
                       " elements from group rank " + std::to_string(peer);
    c10::intrusive_ptr<torch_compat::Work> work;
    try {
      work = backend_->recv(tensors, peer, tag);
    } catch (const std::exception& e) {
      Fail(what, e);
    }
    return std::make_unique<Pending>(this, std::move(work), at::Tensor(), t, tensor,
                                     std::move(what));
  }

  void WaitSends() override {
    auto sends = std::move(sends_);
    sends_.clear();
    for (auto& send : sends) {
      try {
        send.work->wait();
      } catch (const std::exception& e) {
        Fail("send of " + std::to_string(send.tensor.numel()) + " elements", e);
      }
    }
  }

 private:
  // An asynchronous collective: keeps its staged input alive until it completes and copies
  // a staged result back on Wait.
  class Pending final : public CommWork {
   public:
    Pending(const C10dCommGroup* group, c10::intrusive_ptr<torch_compat::Work> work,
            at::Tensor input, at::Tensor staged, at::Tensor target, std::string what)
        : group_(group),
          work_(std::move(work)),
          input_(std::move(input)),
          staged_(std::move(staged)),
          target_(std::move(target)),
          what_(std::move(what)) {}
    ~Pending() override {
      if (!work_) return;
      if (std::uncaught_exceptions() > 0) {
        // An error is unwinding the step: the peer may never complete this operation, and
        // waiting would delay the error's report by the whole timeout. The buffers it may
        // still write must outlive it, so they are kept, on purpose never freed.
        static std::mutex mutex;
        static auto* abandoned = new std::vector<
            std::pair<c10::intrusive_ptr<torch_compat::Work>, std::vector<at::Tensor>>>();
        std::lock_guard<std::mutex> lock(mutex);
        abandoned->emplace_back(std::move(work_),
                                std::vector<at::Tensor>{input_, staged_, target_});
        return;
      }
      try {
        work_->wait();
      } catch (const std::exception&) {
      }
    }
    void Wait() override {
      auto work = std::move(work_);
      try {
        group_->WaitFor(*work, HostWaits(group_->device_, target_));
      } catch (const std::exception& e) {
        group_->Fail(what_, e);
      }
      Unstage(staged_, target_);
    }

   private:
    const C10dCommGroup* group_;
    c10::intrusive_ptr<torch_compat::Work> work_;
    at::Tensor input_, staged_, target_;
    std::string what_;
  };

  struct InFlightSend {
    c10::intrusive_ptr<torch_compat::Work> work;
    at::Tensor tensor;  // kept alive until the send completes
  };

  std::string Where() const {
    return "rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.world_size) +
           ", group '" + name_ + "' (" + ToString(options_.backend) + ")";
  }

  // Turns c10d's, Gloo's and NCCL's exceptions (a peer closed its connection, the timeout
  // passed) into one IoError that says which rank, group and operation failed.
  [[noreturn]] void Fail(const std::string& what, const std::exception& e) const {
    throw IoError(Where() + ": " + what + " failed (" + std::string(kPeerRankLostText) +
                  " or be stuck; timeout " + std::to_string(options_.timeout.count()) +
                  " ms): " + e.what());
  }

  // Under NCCL, Work::wait() only makes the current CUDA stream wait for the collective
  // (ProcessGroupNCCL::WorkNCCL::wait without a timeout): the host goes on at once. When the
  // host needs the result (a host tensor staged through the GPU, a barrier), it waits
  // itself, bounded by the timeout: WorkNCCL::wait(timeout) polls until the collective is
  // done and, past the timeout, aborts the communicator and throws, which Fail turns into
  // IoError. Gloo's wait() always blocks the host and honours the group's timeout.
  static bool HostWaits(const at::Device& backend_device, const at::Tensor& target) {
    return backend_device.is_cuda() && !target.is_cuda();
  }
  void WaitFor(torch_compat::Work& work, bool host) const {
    if (host) {
      work.wait(options_.timeout);
    } else {
      work.wait();
    }
  }

  template <typename Issue>
  void Run(const std::string& what, bool host, Issue issue) {
    try {
      WaitFor(*issue(), host);
    } catch (const std::exception& e) {
      Fail(what, e);
    }
  }

  at::Tensor Staged(const at::Tensor& t) const {
    return t.device() == device_ ? t : t.to(device_).contiguous();
  }
  static void Unstage(const at::Tensor& staged, const at::Tensor& target) {
    if (!staged.is_same(target)) target.copy_(staged);
  }

  void AllReduce(const at::Tensor& tensor, c10d::ReduceOp op, const char* op_name) {
    CheckContiguous(tensor, "all-reduce");
    at::Tensor t = Staged(tensor);
    std::vector<at::Tensor> tensors = {t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    Run(std::string("all-reduce (") + op_name + ") of " + std::to_string(tensor.numel()) +
            " elements",
        HostWaits(device_, tensor), [&] { return backend_->allreduce(tensors, opts); });
    Unstage(t, tensor);
  }

  void CheckPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= size() || peer == group_rank_) {
      throw InternalError(Where() + ": " + what + " with invalid peer " + std::to_string(peer));
    }
  }

  DistributedOptions options_;
  std::string name_;
  std::vector<int> members_;
  int group_rank_;
  c10::intrusive_ptr<torch_compat::Backend> backend_;
  at::Device device_;  // where the backend reads and writes tensors
  std::vector<InFlightSend> sends_;
};

}  // namespace

std::unique_ptr<CommGroup> MakeCommGroup(const Rendezvous& rendezvous, const std::string& name,
                                         std::vector<int> members,
                                         std::optional<CommBackend> backend_override) {
  DistributedOptions o = rendezvous.options();
  o.backend = backend_override.value_or(o.backend);
  if (members.empty()) members = AllRanks(o.world_size);
  const int group_rank = GroupRankOf(name, members, o.rank, o.world_size);
  const auto store =
      torch_compat::MakePrefixStore("hydraulis/" + name + "/", rendezvous.impl().store);
  const int size = static_cast<int>(members.size());
  c10::intrusive_ptr<torch_compat::Backend> backend;
  at::Device device(at::kCPU);
  std::string bind = o.bind_addr;
  if (bind.empty() && IsLoopback(o.master_addr)) bind = o.master_addr;
  try {
    if (o.backend == CommBackend::kGloo) {
      backend = torch_compat::MakeGlooGroup(store, group_rank, size, bind, o.timeout);
    } else {
#ifdef USE_C10D_NCCL
      device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o.device_index));
      backend = torch_compat::MakeNcclGroup(store, group_rank, size, o.timeout);
      // One GPU per rank, said once, so NCCL never guesses the device from the rank.
      backend->setBoundDeviceId(device);
#else
      throw InvalidInput("communication backend nccl: this PyTorch was built without NCCL");
#endif
    }
  } catch (const InvalidInput&) {
    throw;
  } catch (const std::exception& e) {
    throw IoError(Where(o) + ": creating " + ToString(o.backend) + " group '" + name +
                  "' failed (bind address '" + bind + "', timeout " +
                  std::to_string(o.timeout.count()) + " ms): " + e.what());
  }
  return std::make_unique<C10dCommGroup>(o, name, std::move(members), group_rank,
                                         std::move(backend), device);
}

}  // namespace hydraulis
