#include "hydraulis/runtime/distributed.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

#include "hydraulis/base/error.h"
#include "runtime/torch_compat.h"

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
    throw InvalidInput(std::string("environment: ") + name + ": expected an integer, got '" + text +
                       "'");
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
    throw Error(Where(options) + ": rendezvous at " + options.master_addr + ":" +
                std::to_string(options.master_port) + " failed within " +
                std::to_string(options.timeout.count()) +
                " ms (is the port free on rank 0, and did every rank start?): " + e.what());
  }
  impl_ = std::make_unique<Impl>(Impl{options, std::move(store)});
}

Rendezvous::~Rendezvous() = default;

const DistributedOptions& Rendezvous::options() const { return impl_->options; }

struct CommGroup::Impl {
  DistributedOptions options;
  std::string name;
  std::vector<int> members;
  int group_rank = 0;
  c10::intrusive_ptr<torch_compat::GlooGroup> gloo;
  // Sends in flight and the tensors they read from (kept alive until WaitSends).
  std::vector<std::pair<c10::intrusive_ptr<torch_compat::Work>, at::Tensor>> sends;

  std::string Where() const {
    return "rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size) +
           ", group '" + name + "'";
  }

  // Turns c10d's and Gloo's exceptions (a peer closed its connection, the timeout passed)
  // into one Error that says which rank, group and operation failed and what to look at.
  [[noreturn]] void Fail(const std::string& what, const std::exception& e) const {
    throw Error(Where() + ": " + what +
                " failed (a peer rank may have exited or be stuck; timeout " +
                std::to_string(options.timeout.count()) + " ms): " + e.what());
  }

  template <typename Issue>
  void Run(const std::string& what, Issue issue) {
    try {
      issue()->wait();
    } catch (const std::exception& e) {
      Fail(what, e);
    }
  }

  void AllReduce(const at::Tensor& tensor, c10d::ReduceOp op, const char* op_name) {
    if (!tensor.is_contiguous() || !tensor.device().is_cpu()) {
      throw InternalError("CommGroup: all-reduce needs a contiguous CPU tensor");
    }
    std::vector<at::Tensor> tensors = {tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    Run(std::string("all-reduce (") + op_name + ") of " + std::to_string(tensor.numel()) +
            " elements",
        [&] { return gloo->allreduce(tensors, opts); });
  }

  void CheckPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= static_cast<int>(members.size()) || peer == group_rank) {
      throw InternalError(Where() + ": " + what + " with invalid peer " + std::to_string(peer));
    }
  }
};

namespace {

std::vector<int> AllRanks(int world_size) {
  std::vector<int> all;
  for (int r = 0; r < world_size; ++r) all.push_back(r);
  return all;
}

}  // namespace

CommGroup::CommGroup(const Rendezvous& rendezvous, const std::string& name)
    : CommGroup(rendezvous, name, AllRanks(rendezvous.options().world_size)) {}

CommGroup::CommGroup(const Rendezvous& rendezvous, const std::string& name,
                     std::vector<int> members) {
  const DistributedOptions& o = rendezvous.options();
  int group_rank = -1;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m < 0 || m >= o.world_size) {
      throw InvalidInput("group '" + name + "': member " + std::to_string(m) +
                         " is not a rank of a world of " + std::to_string(o.world_size));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (members[j] == m) {
        throw InvalidInput("group '" + name + "': rank " + std::to_string(m) + " listed twice");
      }
    }
    if (m == o.rank) group_rank = static_cast<int>(i);
  }
  if (group_rank < 0) {
    throw InvalidInput("group '" + name + "': rank " + std::to_string(o.rank) + " is not a member");
  }
  std::string bind = o.bind_addr;
  if (bind.empty() && IsLoopback(o.master_addr)) bind = o.master_addr;
  c10::intrusive_ptr<torch_compat::GlooGroup> gloo;
  try {
    gloo = torch_compat::MakeGlooGroup(
        torch_compat::MakePrefixStore("hydraulis/" + name + "/", rendezvous.impl().store),
        group_rank, static_cast<int>(members.size()), bind, o.timeout);
  } catch (const std::exception& e) {
    throw Error(Where(o) + ": creating Gloo group '" + name + "' failed (bind address '" + bind +
                "', timeout " + std::to_string(o.timeout.count()) + " ms): " + e.what());
  }
  impl_ = std::make_unique<Impl>();
  impl_->options = o;
  impl_->name = name;
  impl_->members = std::move(members);
  impl_->group_rank = group_rank;
  impl_->gloo = std::move(gloo);
}

CommGroup::~CommGroup() {
  // A send still in flight reads from a tensor this object keeps alive; finish it quietly
  // (the error, if any, was or will be reported by the peer's receive).
  if (impl_ != nullptr) {
    for (auto& [work, tensor] : impl_->sends) {
      try {
        work->wait();
      } catch (const std::exception&) {
      }
    }
  }
}

int CommGroup::rank() const { return impl_->group_rank; }
int CommGroup::size() const { return static_cast<int>(impl_->members.size()); }
const std::vector<int>& CommGroup::members() const { return impl_->members; }
const std::string& CommGroup::name() const { return impl_->name; }

void CommGroup::AllReduceSum(const at::Tensor& tensor) {
  impl_->AllReduce(tensor, c10d::ReduceOp::SUM, "sum");
}
void CommGroup::AllReduceMax(const at::Tensor& tensor) {
  impl_->AllReduce(tensor, c10d::ReduceOp::MAX, "max");
}
void CommGroup::AllReduceMin(const at::Tensor& tensor) {
  impl_->AllReduce(tensor, c10d::ReduceOp::MIN, "min");
}

void CommGroup::AllGather(const at::Tensor& shard, const at::Tensor& full) {
  if (!shard.is_contiguous() || !full.is_contiguous() || full.numel() != shard.numel() * size()) {
    throw InternalError("CommGroup::AllGather: needs contiguous tensors, full = size * shard");
  }
  std::vector<at::Tensor> inputs = {shard};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) {
    outputs[0].push_back(full.view({-1}).slice(0, r * shard.numel(), (r + 1) * shard.numel()));
  }
  impl_->Run("all-gather of " + std::to_string(full.numel()) + " elements",
             [&] { return impl_->gloo->allgather(outputs, inputs); });
}

void CommGroup::Barrier() {
  impl_->Run("barrier", [&] { return impl_->gloo->barrier(); });
}

void CommGroup::Send(const at::Tensor& tensor, int peer, int tag) {
  impl_->CheckPeer(peer, "send");
  at::Tensor t = tensor.contiguous();
  std::vector<at::Tensor> tensors = {t};
  try {
    impl_->sends.emplace_back(impl_->gloo->send(tensors, peer, tag), t);
  } catch (const std::exception& e) {
    impl_->Fail(
        "send of " + std::to_string(t.numel()) + " elements to group rank " + std::to_string(peer),
        e);
  }
}

void CommGroup::Recv(const at::Tensor& tensor, int peer, int tag) {
  impl_->CheckPeer(peer, "receive");
  if (!tensor.is_contiguous()) throw InternalError("CommGroup::Recv: needs a contiguous tensor");
  std::vector<at::Tensor> tensors = {tensor};
  impl_->Run("receive of " + std::to_string(tensor.numel()) + " elements from group rank " +
                 std::to_string(peer),
             [&] { return impl_->gloo->recv(tensors, peer, tag); });
}

void CommGroup::WaitSends() {
  auto sends = std::move(impl_->sends);
  impl_->sends.clear();
  for (auto& [work, tensor] : sends) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      impl_->Fail("send of " + std::to_string(tensor.numel()) + " elements", e);
    }
  }
}

std::vector<double> AllReduceGradientSync::SumAcrossRanks(const std::vector<double>& local) {
  at::Tensor t = at::tensor(local, at::TensorOptions().dtype(at::kDouble)).contiguous();
  group_.AllReduceSum(t);
  const double* data = t.data_ptr<double>();
  return std::vector<double>(data, data + t.numel());
}

void AllReduceGradientSync::ReduceGradients(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> flat;
  flat.reserve(parameters.size());
  for (const at::Tensor& p : parameters) {
    if (!p.grad().defined()) {
      throw InternalError(
          "AllReduceGradientSync: a parameter has no gradient (ZeroGradients "
          "must run first, also on ranks without micro-batches)");
    }
    flat.push_back(p.grad().reshape({-1}));
  }
  at::Tensor buffer = at::cat(flat);
  group_.AllReduceSum(buffer);
  std::int64_t offset = 0;
  for (const at::Tensor& p : parameters) {
    at::Tensor grad = p.mutable_grad();
    const std::int64_t n = grad.numel();
    grad.copy_(buffer.slice(0, offset, offset + n).view(grad.sizes()));
    offset += n;
  }
}

}  // namespace hydraulis
