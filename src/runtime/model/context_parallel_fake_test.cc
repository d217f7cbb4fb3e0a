// Context-parallel attention with the in-process communicator: the bottom-right causal
// varlen attention it rests on, the collectives every rank issues (the same on every rank,
// none without a sharded document), and, cheaply, its equivalence with one process.
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

// Every rank issues the same collectives, of sizes fixed by the lengths and layout: one
// all-gather of every rank's K and V rows of the sharded documents (padded to the largest
// share) in forward; in backward the same all-gather again (the gathered keys are not kept)
// and one reduce-scatter of their gradient; a rank with no token at all included.
TEST(ContextParallelFakeTest, EveryRankIssuesTheSameCollectives) {
  // cp 3, lengths 12 (rank 0), 5 (rank 1), 7 (sharded: chunks 2,1,1,1,1,1, so shares
  // 3, 2, 2): rank 2 holds two chunks of one token, rank 1 a placed document too.
  const CpCase c{"schedule", 3, {12, 5, 7}, CpLayoutFromPlaces({{0}, {1}, {kSharded}}, 3),
                 4,          2, 8,          1};
  std::vector<std::vector<std::string>> calls;
  const std::vector<CpResult> ranks = RunOnFakeRanks(c, test_support::MakeCpData(c), calls);
  // 3 rows per rank x 3 ranks, K and V side by side (2 x 2 kv heads), head_dim 8.
  const std::vector<std::string> expected = {"all-gather 9x4x8", "all-gather 9x4x8",
                                             "reduce-scatter 9x4x8"};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(calls[static_cast<std::size_t>(r)], expected) << r;

  // Rank 2 holds no token: a one-token sharded document lies on rank 0 alone.
  const CpCase idle{"idle", 3, {12, 5, 1}, CpLayoutFromPlaces({{0}, {1}, {kSharded}}, 3),
                    4,      2, 8,          1};
  RunOnFakeRanks(idle, test_support::MakeCpData(idle), calls);
  const std::vector<std::string> one_row = {"all-gather 3x4x8", "all-gather 3x4x8",
                                            "reduce-scatter 3x4x8"};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(calls[static_cast<std::size_t>(r)], one_row) << r;
}

TEST(ContextParallelFakeTest, NoShardedDocumentNoCommunication) {
  const CpCase c{"placed", 2, {6, 9, 4}, {1, 0, 1}, 4, 2, 8, 2};
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
// 0, 1, 4 (3 rows, the largest share), rank 1 positions 2, 3 and a zero row. Gathered rows
// (after rank 0's 3 storage rows): 3, 4, 5 = positions 0, 1, 4; 6, 7 = positions 2, 3.
TEST(ContextParallelFakeTest, RowsFindEveryChunkInTheGatheredBuffer) {
  const std::vector<std::int64_t> lengths = {5};
  const ContextParallelRows r0 = MakeContextParallelRows(
      MakeLocalTokenLayout(lengths, CpLayoutFromPlaces({{kSharded}}, 2), 2, 0), at::kCPU);
  EXPECT_EQ(r0.rows_per_rank, 3);
  EXPECT_FALSE(r0.real_rows.defined());
  EXPECT_TRUE(at::equal(r0.send_rows, at::tensor({0, 1, 2}, at::kLong)));
  // Chunk [0,2) reads positions 0, 1; chunk [4,5) reads positions 0..4.
  EXPECT_TRUE(at::equal(r0.key_rows, at::tensor({3, 4, 3, 4, 6, 7, 5}, at::kLong)));
  EXPECT_EQ(r0.cu_seqlens_k, (std::vector<std::int64_t>{0, 2, 7}));

  // Rank 1 with a placed document before (rows 0..2, its own keys) and storage padded to 4:
  // storage rows 0..3 (document 0), 4 (position 2), 8 (position 3); gathered rows from 12.
  const ContextParallelRows r1 = MakeContextParallelRows(
      MakeLocalTokenLayout(std::vector<std::int64_t>{3, 5},
                           CpLayoutFromPlaces({{1}, {kSharded}}, 2), 2, 1, 4),
      at::kCPU);
  EXPECT_EQ(r1.rows_per_rank, 3);
  EXPECT_TRUE(at::equal(r1.real_rows, at::tensor({0, 1, 2, 4, 8}, at::kLong)));
  EXPECT_TRUE(at::equal(r1.send_rows, at::tensor({4, 8}, at::kLong)));
  EXPECT_TRUE(at::equal(r1.key_rows, at::tensor({0, 1, 2, 12, 13, 15, 12, 13, 15, 16}, at::kLong)));
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
