// FakeCommWorld (distributed.h): the members of a group meet in shared state, each
// collective being an exchange of every member's tensor followed by the same computation,
// in group-rank order, on every member.
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/distributed.h"

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
  // Messages in flight: (group, from, to, tag) -> tensors in send order.
  std::map<std::tuple<std::string, int, int, int>, std::vector<at::Tensor>> mailboxes;

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

  void AllGather(const at::Tensor& shard, const at::Tensor& full) override {
    if (full.numel() != shard.numel() * size()) {
      throw InternalError("FakeCommGroup::AllGather: full must be size * shard");
    }
    const std::vector<at::Tensor> all = Exchange(shard);
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : all) flat.push_back(t.reshape({-1}));
    full.copy_(at::cat(flat).view(full.sizes()));
  }

  void Barrier() override { Exchange(at::zeros({1})); }

  // Deferred: the exchange happens at Wait, which every member reaches in issue order.
  std::unique_ptr<CommWork> ReduceScatterSumAsync(const at::Tensor& full,
                                                  const at::Tensor& shard) override {
    if (full.numel() != shard.numel() * size()) {
      throw InternalError("FakeCommGroup::ReduceScatterSum: full must be size * shard");
    }
    class Deferred final : public CommWork {
     public:
      Deferred(FakeCommGroup* group, at::Tensor full, at::Tensor shard)
          : group_(group), full_(std::move(full)), shard_(std::move(shard)) {}
      void Wait() override {
        const std::vector<at::Tensor> all = group_->Exchange(full_);
        const std::int64_t n = shard_.numel();
        const std::int64_t first = n * group_->rank();
        at::Tensor sum = all[0].reshape({-1}).slice(0, first, first + n).clone();
        for (std::size_t r = 1; r < all.size(); ++r) {
          sum = sum + all[r].reshape({-1}).slice(0, first, first + n);
        }
        shard_.copy_(sum.view(shard_.sizes()));
      }

     private:
      FakeCommGroup* group_;
      at::Tensor full_, shard_;
    };
    return std::make_unique<Deferred>(this, full, shard);
  }

  void Send(const at::Tensor& tensor, int peer, int tag) override {
    CheckPeer(peer);
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->mailboxes[{name_, group_rank_, peer, tag}].push_back(tensor.detach().clone());
    state_->changed.notify_all();
  }

  void Recv(const at::Tensor& tensor, int peer, int tag) override {
    CheckPeer(peer);
    std::unique_lock<std::mutex> lock(state_->mutex);
    const auto key = std::make_tuple(name_, peer, group_rank_, tag);
    state_->Wait(
        lock, [&] { return !state_->mailboxes[key].empty(); },
        "group '" + name_ + "': receive from group rank " + std::to_string(peer));
    auto& box = state_->mailboxes[key];
    const at::Tensor message = box.front();
    box.erase(box.begin());
    if (message.numel() != tensor.numel()) {
      throw InternalError("fake communication: group '" + name_ + "': received " +
                          std::to_string(message.numel()) + " elements, expected " +
                          std::to_string(tensor.numel()));
    }
    tensor.copy_(message.view(tensor.sizes()));
  }

  void WaitSends() override {}  // sends complete at once

 private:
  void CheckPeer(int peer) const {
    if (peer < 0 || peer >= size() || peer == group_rank_) {
      throw InternalError("FakeCommGroup '" + name_ + "': invalid peer " + std::to_string(peer));
    }
  }

  // Every member's copy of `tensor`, by group rank, once all have called.
  std::vector<at::Tensor> Exchange(const at::Tensor& tensor) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    const auto key = std::make_pair(name_, sequence_++);
    auto& e = state_->exchanges[key];
    if (e.inputs.empty()) e.inputs.resize(members_.size());
    e.inputs[static_cast<std::size_t>(group_rank_)] = tensor.detach().clone();
    ++e.arrived;
    state_->changed.notify_all();
    const int n = size();
    state_->Wait(
        lock, [&] { return e.arrived == n; },
        "group '" + name_ + "': collective " + std::to_string(key.second));
    std::vector<at::Tensor> all = e.inputs;
    if (++e.departed == n) state_->exchanges.erase(key);
    return all;
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
