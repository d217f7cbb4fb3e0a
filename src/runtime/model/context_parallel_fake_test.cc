// Context-parallel attention with the in-process communicator: the bottom-right causal
// varlen attention it rests on, the messages each pair of ranks sharing a document exchanges
// (none without a sharded document), and, cheaply, its equivalence with one process.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/attention.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "runtime/testing/context_parallel_case.h"
#include "runtime/testing/rank_harness.h"

namespace hydraulis {
namespace {

using test_support::CpCase;
using test_support::CpResult;
using test_support::OnThreads;

// A CommGroup that forwards to another and writes down each collective it issues.
class RecordingCommGroup final : public CommGroup {
 public:
  explicit RecordingCommGroup(std::unique_ptr<CommGroup> inner) : inner_(std::move(inner)) {}
  const std::vector<std::string>& calls() const { return calls_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<int>& members() const override { return inner_->members(); }
  const std::string& name() const override { return inner_->name(); }
  void AllReduceSum(const at::Tensor& t) override {
    Note("all-reduce sum", t);
    inner_->AllReduceSum(t);
  }
  void AllReduceMax(const at::Tensor& t) override {
    Note("all-reduce max", t);
    inner_->AllReduceMax(t);
  }
  void AllReduceMin(const at::Tensor& t) override {
    Note("all-reduce min", t);
    inner_->AllReduceMin(t);
  }
  std::unique_ptr<CommWork> ReduceScatterSumAsync(const at::Tensor& full,
                                                  const at::Tensor& shard) override {
    Note("reduce-scatter", full);
    return inner_->ReduceScatterSumAsync(full, shard);
  }
  std::unique_ptr<CommWork> AllGatherAsync(const at::Tensor& shard,
                                           const at::Tensor& full) override {
    Note("all-gather", full);
    return inner_->AllGatherAsync(shard, full);
  }
  void Barrier() override { inner_->Barrier(); }
  void Send(const at::Tensor& t, int peer, int tag) override {
    Note("send", t);
    inner_->Send(t, peer, tag);
  }
  std::unique_ptr<CommWork> RecvAsync(const at::Tensor& t, int peer, int tag) override {
    Note("receive", t);
    return inner_->RecvAsync(t, peer, tag);
  }
  void WaitSends() override { inner_->WaitSends(); }

 private:
  void Note(const std::string& what, const at::Tensor& t) {
    // Appended piece by piece: g++ 12 misreports `"literal" + std::string` (GCC PR105651).
    std::string call = what;
    for (std::size_t i = 0; i < t.sizes().size(); ++i) {
      call.append(i == 0 ? " " : "x");
      call.append(std::to_string(t.sizes()[i]));
    }
    calls_.push_back(call);
  }
  std::unique_ptr<CommGroup> inner_;
  std::vector<std::string> calls_;
};

// Runs `c` on fake ranks; returns each rank's result and recorded collectives.
std::vector<CpResult> RunOnFakeRanks(const CpCase& c, const test_support::CpData& data,
                                     std::vector<std::vector<std::string>>& calls) {
  FakeCommWorld world(c.cp);
  std::vector<CpResult> ranks(static_cast<std::size_t>(c.cp));
  calls.assign(static_cast<std::size_t>(c.cp), {});
  OnThreads(c.cp, [&](int r) {
    RecordingCommGroup group(world.Group(r, "cp"));
    ranks[static_cast<std::size_t>(r)] = test_support::CpRankRun(c, data, group);
    calls[static_cast<std::size_t>(r)] = group.calls();
  });
  return ranks;
}

// Segments with as many keys as queries are plain packed causal attention; a segment with
// more keys is the bottom rows of causal attention over all of its keys.
TEST(VarlenCausalAttentionTest, EqualSegmentsArePackedAndLongerKeysAlignBottomRight) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor q = at::randn({12, 4, 8}, gen, at::kFloat);
  const at::Tensor k = at::randn({12, 2, 8}, gen, at::kFloat);
  const at::Tensor v = at::randn({12, 2, 8}, gen, at::kFloat);
  const std::vector<std::int64_t> cu = {0, 5, 12};
  EXPECT_TRUE(at::allclose(VarlenCausalAttention(q, k, v, cu, cu),
                           DenseCausalAttention(q, k, v, cu), 1e-6, 1e-7));

  // Queries = rows 4..6 of a 7-token document, keys = rows 0..6 (one segment); then
  // queries 2..4 of a 5-token document against its keys 0..4.
  const at::Tensor full_a =
      DenseCausalAttention(q.slice(0, 0, 7), k.slice(0, 0, 7), v.slice(0, 0, 7), {0, 7});
  const at::Tensor full_b =
      DenseCausalAttention(q.slice(0, 7, 12), k.slice(0, 7, 12), v.slice(0, 7, 12), {0, 5});
  const at::Tensor queries = at::cat({q.slice(0, 4, 7), q.slice(0, 9, 12)}, 0);
  const at::Tensor out = VarlenCausalAttention(queries, k, v, {0, 3, 6}, {0, 7, 12});
  EXPECT_TRUE(at::allclose(out.slice(0, 0, 3), full_a.slice(0, 4, 7), 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(out.slice(0, 3, 6), full_b.slice(0, 2, 5), 1e-6, 1e-7));
  // A top-left aligned mask would let query 0 see key 0 only: its output would be v[0].
  EXPECT_FALSE(at::allclose(out[0], v[0].repeat_interleave(2, 0), 1e-3, 1e-3));

  EXPECT_THROW(VarlenCausalAttention(queries, k, v, {0, 3, 6}, {0, 2, 12}), InvalidInput);
  EXPECT_THROW(VarlenCausalAttention(queries, k, v, {0, 3, 6}, {0, 7}), InvalidInput);
}

// The CPU path (scaled_dot_product_attention per segment: is_causal for a whole document, a
// bottom-right mask for a chunk against its prefix) against the dense reference, values and
// gradients, with grouped-query heads and an empty chunk between segments.
TEST(VarlenCausalAttentionTest, SdpaPathMatchesTheDenseReferenceWithGradients) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  // Segments: a whole 9-token document, an empty chunk against 4 keys, a 5-query chunk
  // against its 13-key prefix, a 1-query chunk against 1 key.
  const std::vector<std::int64_t> cu_q = {0, 9, 9, 14, 15};
  const std::vector<std::int64_t> cu_k = {0, 9, 13, 26, 27};
  const at::Tensor q0 = at::randn({15, 4, 8}, gen, at::kFloat);
  const at::Tensor k0 = at::randn({27, 2, 8}, gen, at::kFloat);
  const at::Tensor v0 = at::randn({27, 2, 8}, gen, at::kFloat);
  const at::Tensor w = at::randn({15, 4, 8}, gen, at::kFloat);
  std::vector<at::Tensor> grads[2];
  at::Tensor outs[2];
  for (int path = 0; path < 2; ++path) {
    const at::Tensor q = q0.clone().requires_grad_(true);
    const at::Tensor k = k0.clone().requires_grad_(true);
    const at::Tensor v = v0.clone().requires_grad_(true);
    outs[path] = path == 0 ? SdpaVarlenCausalAttention(q, k, v, cu_q, cu_k)
                           : DenseVarlenCausalAttention(q, k, v, cu_q, cu_k);
    (outs[path] * w).sum().backward();
    grads[path] = {q.grad(), k.grad(), v.grad()};
  }
  EXPECT_TRUE(at::allclose(outs[0], outs[1], 1e-5, 1e-6));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::allclose(grads[0][static_cast<std::size_t>(i)],
                             grads[1][static_cast<std::size_t>(i)], 1e-5, 1e-6))
        << i;
  }
  // Keys 9..12 belong to the empty chunk alone: no query reads them.
  EXPECT_EQ(grads[0][1].slice(0, 9, 13).abs().max().item<float>(), 0.0f);
}

// Each pair of ranks that shares a document exchanges its rows, sized by the lengths and
// layout alone, the lower rank sending first: forward sends this rank's rows and receives
// the other's; backward exchanges them again (the received keys are not kept), then sends
// the received rows' gradients back and receives those of its own. Ranks that share no
// document communicate nothing.
TEST(ContextParallelFakeTest, PairsSharingADocumentExchangeTheirRows) {
  // cp 3, lengths 12 (rank 0), 5 (rank 1), 7 (over all: chunks 2,1,1,1,1,1, so shares
  // 3, 2, 2).
  const CpCase c{"schedule", 3, {12, 5, 7}, CpLayoutFromPlaces({{0}, {1}, {kSharded}}, 3),
                 4,          2, 8,          1};
  std::vector<std::vector<std::string>> calls;
  RunOnFakeRanks(c, test_support::MakeCpData(c), calls);
  using Calls = std::vector<std::string>;
  const auto thrice = [](const Calls& keys, const Calls& gradients) {
    Calls all = keys;
    all.insert(all.end(), keys.begin(), keys.end());
    all.insert(all.end(), gradients.begin(), gradients.end());
    return all;
  };
  EXPECT_EQ(calls[0], thrice({"send 3x4x8", "receive 2x4x8", "send 3x4x8", "receive 2x4x8"},
                             {"send 2x4x8", "receive 3x4x8", "send 2x4x8", "receive 3x4x8"}));
  EXPECT_EQ(calls[1], thrice({"receive 3x4x8", "send 2x4x8", "send 2x4x8", "receive 2x4x8"},
                             {"receive 2x4x8", "send 3x4x8", "send 2x4x8", "receive 2x4x8"}));
  EXPECT_EQ(calls[2], thrice({"receive 3x4x8", "send 2x4x8", "receive 2x4x8", "send 2x4x8"},
                             {"receive 2x4x8", "send 3x4x8", "receive 2x4x8", "send 2x4x8"}));

  // A one-token document over all three: only rank 0 holds a token; empty messages are not
  // sent.
  const CpCase idle{"idle", 3, {12, 5, 1}, CpLayoutFromPlaces({{0}, {1}, {kSharded}}, 3),
                    4,      2, 8,          1};
  RunOnFakeRanks(idle, test_support::MakeCpData(idle), calls);
  EXPECT_EQ(calls[0], thrice({"send 1x4x8", "send 1x4x8"}, {"receive 1x4x8", "receive 1x4x8"}));
  EXPECT_EQ(calls[1], thrice({"receive 1x4x8"}, {"send 1x4x8"}));
  EXPECT_EQ(calls[2], thrice({"receive 1x4x8"}, {"send 1x4x8"}));

  // cp 4, an 8-token document over ranks {1, 3}: ranks 0 and 2 send and receive nothing.
  const CpCase subset{"subset", 4, {6, 8}, CpLayoutFromPlaces({{0}, {1, 3}}, 4), 4, 2, 8, 1};
  const test_support::CpData data = test_support::MakeCpData(subset);
  const std::vector<CpResult> ranks = RunOnFakeRanks(subset, data, calls);
  EXPECT_TRUE(calls[0].empty());
  EXPECT_TRUE(calls[2].empty());
  EXPECT_EQ(calls[1], thrice({"send 4x4x8", "receive 4x4x8"}, {"send 4x4x8", "receive 4x4x8"}));
  EXPECT_EQ(calls[3], thrice({"receive 4x4x8", "send 4x4x8"}, {"receive 4x4x8", "send 4x4x8"}));
  test_support::ExpectRanksMatchReference(ranks, test_support::CpReference(data), 1e-5);
}

TEST(ContextParallelFakeTest, NoShardedDocumentNoCommunication) {
  const CpCase c{"placed", 2, {6, 9, 4}, CpLayoutFromPlaces({{1}, {0}, {1}}, 2), 4, 2, 8, 2};
  std::vector<std::vector<std::string>> calls;
  const test_support::CpData data = test_support::MakeCpData(c);
  const std::vector<CpResult> ranks = RunOnFakeRanks(c, data, calls);
  for (const auto& rank_calls : calls) EXPECT_TRUE(rank_calls.empty());
  test_support::ExpectRanksMatchReference(ranks, test_support::CpReference(data), 1e-5);
}

// The fake's collectives are exact sums in rank order, so the equivalence holds as with Gloo.
TEST(ContextParallelFakeTest, RanksMatchOneProcess) {
  for (const CpCase& c :
       {CpCase{"cp2",
               2,
               {13, 7, 5, 11},
               CpLayoutFromPlaces({{kSharded}, {0}, {1}, {kSharded}}, 2),
               4,
               2,
               8,
               1},
        CpCase{"cp3 padded",
               3,
               {17, 4, 9, 3},
               CpLayoutFromPlaces({{kSharded}, {1}, {kSharded}, {kSharded}}, 3),
               6,
               3,
               8,
               4},
        CpCase{
            "idle rank", 3, {12, 5, 1}, CpLayoutFromPlaces({{0}, {1}, {kSharded}}, 3), 4, 2, 8, 1},
        CpCase{
            "idle rank, nothing sharded", 2, {6, 9}, CpLayoutFromPlaces({{1}, {1}}, 2), 4, 2, 8, 1},
        CpCase{"cp4 subsets",
               4,
               {21, 3, 14, 9, 30},
               CpLayoutFromPlaces({{0, 2}, {0, 1, 3}, {kSharded}, {2}, {1, 3}}, 4),
               4,
               2,
               8,
               1}}) {
    SCOPED_TRACE(c.name);
    std::vector<std::vector<std::string>> calls;
    const test_support::CpData data = test_support::MakeCpData(c);
    const std::vector<CpResult> ranks = RunOnFakeRanks(c, data, calls);
    test_support::ExpectRanksMatchReference(ranks, test_support::CpReference(data), 1e-5);
  }
}

// One 5-token document over cp 2: chunks [0,2) [2,3) [3,4) [4,5); rank 0 holds positions
// 0, 1, 4 (storage rows 0, 1, 2) and receives rank 1's positions 2, 3 after them (rows 3, 4).
TEST(ContextParallelFakeTest, RowsFindEveryChunkInStorageOrAmongTheReceivedRows) {
  const std::vector<std::int64_t> lengths = {5};
  const ContextParallelRows r0 = MakeContextParallelRows(
      MakeLocalTokenLayout(lengths, CpLayoutFromPlaces({{kSharded}}, 2), 2, 0), at::kCPU);
  EXPECT_EQ(r0.send_counts, (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(r0.receive_counts, (std::vector<std::int64_t>{0, 2}));
  EXPECT_FALSE(r0.real_rows.defined());
  EXPECT_TRUE(at::equal(r0.send_rows, at::tensor({0, 1, 2}, at::kLong)));
  // Chunk [0,2) reads positions 0, 1; chunk [4,5) reads positions 0..4.
  EXPECT_TRUE(at::equal(r0.key_rows, at::tensor({0, 1, 0, 1, 3, 4, 2}, at::kLong)));
  EXPECT_EQ(r0.cu_seqlens_k, (std::vector<std::int64_t>{0, 2, 7}));

  // Rank 1 with a placed document before (rows 0..2, its own keys) and storage padded to 4:
  // storage rows 0..3 (document 0), 4 (position 2), 8 (position 3); received rows from 12
  // (positions 0, 1, 4).
  const ContextParallelRows r1 = MakeContextParallelRows(
      MakeLocalTokenLayout(std::vector<std::int64_t>{3, 5},
                           CpLayoutFromPlaces({{1}, {kSharded}}, 2), 2, 1, 4),
      at::kCPU);
  EXPECT_EQ(r1.send_counts, (std::vector<std::int64_t>{2, 0}));
  EXPECT_EQ(r1.receive_counts, (std::vector<std::int64_t>{3, 0}));
  EXPECT_TRUE(at::equal(r1.real_rows, at::tensor({0, 1, 2, 4, 8}, at::kLong)));
  EXPECT_TRUE(at::equal(r1.send_rows, at::tensor({4, 8}, at::kLong)));
  EXPECT_TRUE(at::equal(r1.key_rows, at::tensor({0, 1, 2, 12, 13, 4, 12, 13, 4, 8}, at::kLong)));
  EXPECT_EQ(r1.cu_seqlens_k, (std::vector<std::int64_t>{0, 3, 6, 10}));
}

TEST(ContextParallelFakeTest, RejectsAGroupThatIsNotTheLayouts) {
  FakeCommWorld world(2);
  std::unique_ptr<CommGroup> group = world.Group(0, "cp");
  const LocalTokenLayout local =
      MakeLocalTokenLayout(std::vector<std::int64_t>{5}, CpLayoutFromPlaces({{kSharded}}, 2), 2, 1);
  const at::Tensor q = at::zeros({local.storage_tokens(), 2, 4});
  try {
    ContextParallelAttention(q, q, q, local, *group);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of cp 2"), std::string::npos) << e.what();
  }
  const LocalTokenLayout mine =
      MakeLocalTokenLayout(std::vector<std::int64_t>{5}, CpLayoutFromPlaces({{kSharded}}, 2), 2, 0);
  EXPECT_THROW(ContextParallelAttention(at::zeros({1, 2, 4}), at::zeros({1, 2, 4}),
                                        at::zeros({1, 2, 4}), mine, *group),
               InvalidInput);
}

}  // namespace
}  // namespace hydraulis
