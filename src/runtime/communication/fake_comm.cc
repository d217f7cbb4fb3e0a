// FakeCommWorld (comm_group.h): the members of a group meet in shared state, each
// collective being an exchange of every member's tensor followed by the same computation,
// in group-rank order, on every member. Point-to-point operations follow NCCL's rule, the
// strictest of the backends: between two ranks they complete in issue order, one after
// another, so each side's next operation must be the other side's counterpart (a send
// meeting a receive of the same size); anything else is reported at once as the deadlock
// or wrong match it would be under NCCL. Tags must agree too, which is Gloo's rule.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"

namespace hydraulis {

struct FakeCommWorld::State {
  int world_size = 0;
  std::chrono::milliseconds timeout{0};
  std::mutex mutex;
  std::condition_variable changed;

  // One collective in progress: the members' inputs, by group rank.
  struct Exchange {
    std::vector<at::Tensor> inputs;
    int arrived = 0;
    int departed = 0;
  };
  std::map<std::pair<std::string, std::int64_t>, Exchange> exchanges;  // (group, sequence)
  // Point-to-point operations between two ranks of a group, in each side's issue order.
  struct Transfer {
    bool send = false;
    int tag = 0;
    at::Tensor tensor;  // the message (a send's copy) or where it goes (a receive)
    bool done = false;
  };
  struct Channel {
    std::deque<std::shared_ptr<Transfer>> pending[2];  // by side: the lower group rank first
    std::string error;                                 // set once the two sides disagree
  };
  std::map<std::tuple<std::string, int, int>, Channel> channels;  // (group, low, high)

  template <typename Ready>
  void Wait(std::unique_lock<std::mutex>& lock, Ready ready, const std::string& what) {
    if (!changed.wait_for(lock, timeout, ready)) {
      throw IoError("fake communication: " + what + " timed out after " +
                    std::to_string(timeout.count()) + " ms (a peer thread did not join)");
    }
  }
};

namespace {

class FakeCommGroup final : public CommGroup {
 public:
  FakeCommGroup(std::shared_ptr<FakeCommWorld::State> state, std::string name,
                std::vector<int> members, int group_rank)
      : state_(std::move(state)),
        name_(std::move(name)),
        members_(std::move(members)),
        group_rank_(group_rank) {}

  int rank() const override { return group_rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const override { return members_; }
  const std::string& name() const override { return name_; }

  void AllReduceSum(const at::Tensor& t) override {
    Reduce(t, [](const at::Tensor& a, const at::Tensor& b) { return a + b; });
  }
  void AllReduceMax(const at::Tensor& t) override {
    Reduce(t, [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); });
  }
  void AllReduceMin(const at::Tensor& t) override {
    Reduce(t, [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); });
  }

  std::unique_ptr<CommWork> AllGatherAsync(const at::Tensor& shard,
                                           const at::Tensor& full) override {
    if (full.numel() != shard.numel() * size()) {
      throw InternalError("FakeCommGroup::AllGather: full must be size * shard");
    }
    return Deferred(shard, [full](const std::vector<at::Tensor>& all) {
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : all) flat.push_back(t.reshape({-1}));
      full.copy_(at::cat(flat).view(full.sizes()));
    });
  }

  void Barrier() override { Exchange(at::zeros({1})); }

  std::unique_ptr<CommWork> ReduceScatterSumAsync(const at::Tensor& full,
                                                  const at::Tensor& shard) override {
    if (full.numel() != shard.numel() * size()) {
      throw InternalError("FakeCommGroup::ReduceScatterSum: full must be size * shard");
    }
    const std::int64_t n = shard.numel();
    const std::int64_t first = n * rank();
    return Deferred(full, [shard, n, first](const std::vector<at::Tensor>& all) {
      at::Tensor sum = all[0].reshape({-1}).slice(0, first, first + n).clone();
      for (std::size_t r = 1; r < all.size(); ++r) {
        sum = sum + all[r].reshape({-1}).slice(0, first, first + n);
      }
      shard.copy_(sum.view(shard.sizes()));
    });
  }

  void Send(const at::Tensor& tensor, int peer, int tag) override {
    CheckPeer(peer);
    auto transfer = std::make_shared<FakeCommWorld::State::Transfer>();
    transfer->send = true;
    transfer->tag = tag;
    transfer->tensor = tensor.detach().clone();
    std::lock_guard<std::mutex> lock(state_->mutex);
    Issue(peer, transfer);
    sends_.push_back({peer, std::move(transfer)});
  }

  std::unique_ptr<CommWork> RecvAsync(const at::Tensor& tensor, int peer, int tag) override {
    CheckPeer(peer);
    auto transfer = std::make_shared<FakeCommWorld::State::Transfer>();
    transfer->tag = tag;
    transfer->tensor = tensor;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      Issue(peer, transfer);
    }
    class Receive final : public CommWork {
     public:
      Receive(FakeCommGroup* group, int peer, std::shared_ptr<FakeCommWorld::State::Transfer> t)
          : group_(group), peer_(peer), transfer_(std::move(t)) {}
      void Wait() override { group_->AwaitTransfer(peer_, *transfer_, "receive from"); }

     private:
      FakeCommGroup* group_;
      int peer_;
      std::shared_ptr<FakeCommWorld::State::Transfer> transfer_;
    };
    return std::make_unique<Receive>(this, peer, std::move(transfer));
  }

  void WaitSends() override {
    auto sends = std::move(sends_);
    sends_.clear();
    for (const auto& [peer, transfer] : sends) AwaitTransfer(peer, *transfer, "send to");
  }

 private:
  FakeCommWorld::State::Channel& ChannelWith(int peer) {
    return state_->channels[{name_, std::min(group_rank_, peer), std::max(group_rank_, peer)}];
  }

  // Appends `transfer` to this side of the channel with `peer` and completes every pair of
  // counterparts now at the heads of both sides. Caller holds the state's mutex.
  void Issue(int peer, std::shared_ptr<FakeCommWorld::State::Transfer> transfer) {
    FakeCommWorld::State::Channel& channel = ChannelWith(peer);
    if (!channel.error.empty()) throw InternalError(channel.error);
    const int mine = group_rank_ < peer ? 0 : 1;
    channel.pending[mine].push_back(std::move(transfer));
    auto& low = channel.pending[0];
    auto& high = channel.pending[1];
    while (!low.empty() && !high.empty()) {
      FakeCommWorld::State::Transfer& a = *low.front();
      FakeCommWorld::State::Transfer& b = *high.front();
      const int low_rank = std::min(group_rank_, peer), high_rank = std::max(group_rank_, peer);
      auto describe = [](const FakeCommWorld::State::Transfer& t) {
        return std::string(t.send ? "send" : "receive") + " (tag " + std::to_string(t.tag) + ", " +
               std::to_string(t.tensor.numel()) + " elements)";
      };
      if (a.send == b.send || a.tag != b.tag || a.tensor.numel() != b.tensor.numel()) {
        channel.error = "fake communication: group '" + name_ + "': group rank " +
                        std::to_string(low_rank) + "'s next operation with group rank " +
                        std::to_string(high_rank) + " is a " + describe(a) + ", its peer's a " +
                        describe(b) +
                        (a.send == b.send ? ": under NCCL, which runs a pair's operations in "
                                            "issue order, both would wait for ever"
                                          : ": they do not match");
        state_->changed.notify_all();
        throw InternalError(channel.error);
      }
      FakeCommWorld::State::Transfer& from = a.send ? a : b;
      FakeCommWorld::State::Transfer& to = a.send ? b : a;
      to.tensor.copy_(from.tensor.view(to.tensor.sizes()));
      from.done = to.done = true;
      low.pop_front();
      high.pop_front();
      state_->changed.notify_all();
    }
  }

  void AwaitTransfer(int peer, const FakeCommWorld::State::Transfer& transfer, const char* what) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    FakeCommWorld::State::Channel& channel = ChannelWith(peer);
    state_->Wait(
        lock, [&] { return transfer.done || !channel.error.empty(); },
        "group '" + name_ + "': " + what + " group rank " + std::to_string(peer));
    if (!transfer.done) throw InternalError(channel.error);
  }

  void CheckPeer(int peer) const {
    if (peer < 0 || peer >= size() || peer == group_rank_) {
      throw InternalError("FakeCommGroup '" + name_ + "': invalid peer " + std::to_string(peer));
    }
  }

  // Puts this member's copy of `tensor` into the group's next collective; returns its key.
  std::pair<std::string, std::int64_t> Deposit(const at::Tensor& tensor) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const auto key = std::make_pair(name_, sequence_++);
    auto& e = state_->exchanges[key];
    if (e.inputs.empty()) e.inputs.resize(members_.size());
    e.inputs[static_cast<std::size_t>(group_rank_)] = tensor.detach().clone();
    ++e.arrived;
    state_->changed.notify_all();
    return key;
  }

  // Every member's copy, by group rank, once all have deposited theirs.
  std::vector<at::Tensor> Collect(const std::pair<std::string, std::int64_t>& key) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    auto& e = state_->exchanges[key];
    const int n = size();
    state_->Wait(
        lock, [&] { return e.arrived == n; },
        "group '" + name_ + "': collective " + std::to_string(key.second));
    std::vector<at::Tensor> all = e.inputs;
    if (++e.departed == n) state_->exchanges.erase(key);
    return all;
  }

  std::vector<at::Tensor> Exchange(const at::Tensor& tensor) { return Collect(Deposit(tensor)); }

  // An asynchronous collective: this member's input goes in at once (so members may wait
  // in any order), `finish` runs on every member's inputs at Wait.
  using Finish = std::function<void(const std::vector<at::Tensor>&)>;
  std::unique_ptr<CommWork> Deferred(const at::Tensor& input, Finish finish) {
    class Work final : public CommWork {
     public:
      Work(FakeCommGroup* group, std::pair<std::string, std::int64_t> key, Finish finish)
          : group_(group), key_(std::move(key)), finish_(std::move(finish)) {}
      void Wait() override {
        if (!finish_) return;
        const Finish finish = std::move(finish_);
        finish_ = nullptr;
        finish(group_->Collect(key_));
      }
      ~Work() override {
        if (finish_ && std::uncaught_exceptions() == 0) {
          try {
            Wait();
          } catch (const std::exception&) {
          }
        }
      }

     private:
      FakeCommGroup* group_;
      std::pair<std::string, std::int64_t> key_;
      Finish finish_;
    };
    return std::make_unique<Work>(this, Deposit(input), std::move(finish));
  }

  template <typename Op>
  void Reduce(const at::Tensor& t, Op op) {
    const std::vector<at::Tensor> all = Exchange(t);
    at::Tensor acc = all[0];
    for (std::size_t r = 1; r < all.size(); ++r) acc = op(acc, all[r]);
    t.copy_(acc);
  }

  std::shared_ptr<FakeCommWorld::State> state_;
  std::string name_;
  std::vector<int> members_;
  int group_rank_;
  std::int64_t sequence_ = 0;
  std::vector<std::pair<int, std::shared_ptr<FakeCommWorld::State::Transfer>>> sends_;  // unwaited
};

}  // namespace

FakeCommWorld::FakeCommWorld(int world_size, std::chrono::milliseconds timeout)
    : state_(std::make_shared<State>()) {
  if (world_size < 1) {
    throw InvalidInput("fake communication: world_size must be >= 1, got " +
                       std::to_string(world_size));
  }
  state_->world_size = world_size;
  state_->timeout = timeout;
}

FakeCommWorld::~FakeCommWorld() = default;

int FakeCommWorld::world_size() const { return state_->world_size; }

std::unique_ptr<CommGroup> FakeCommWorld::Group(int rank, const std::string& name,
                                                std::vector<int> members) {
  if (members.empty()) {
    for (int r = 0; r < state_->world_size; ++r) members.push_back(r);
  }
  int group_rank = -1;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m < 0 || m >= state_->world_size) {
      throw InvalidInput("group '" + name + "': member " + std::to_string(m) +
                         " is not a rank of a world of " + std::to_string(state_->world_size));
    }
    if (m == rank) group_rank = static_cast<int>(i);
  }
  if (group_rank < 0) {
    throw InvalidInput("group '" + name + "': rank " + std::to_string(rank) + " is not a member");
  }
  return std::make_unique<FakeCommGroup>(state_, name, std::move(members), group_rank);
}

}  // namespace hydraulis
