// A cp rank's local tokens: which rows it holds, their original positions, their targets
// (the document's next token even when another rank holds it), and padding between
// segments that holds nothing.
#include "hydraulis/runtime/model/local_tokens.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/model/packed_batch.h"

namespace hydraulis {
namespace {

std::vector<std::int64_t> Values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

// Token ids 100 + row, so an id names its row in the micro-batch.
at::Tensor Ids(std::int64_t total) { return at::arange(total, at::kLong) + 100; }

using V = std::vector<std::int64_t>;

// Document 0 (5 tokens) sharded over cp 2: chunks [0,2) [2,3) [3,4) [4,5); rank 0 holds
// [0,2) and [4,5), rank 1 [2,3) and [3,4). Document 1 (3 tokens, micro-batch rows 5..7)
// is placed whole on rank 0.
TEST(LocalTokensTest, ShardedChunksKeepOriginalPositionsAndNextTokens) {
  const V lengths = {5, 3};
  const CpLayout layout = CpLayoutFromPlaces({{kSharded}, {0}}, 2);
  const LocalTokenLayout l0 = MakeLocalTokenLayout(lengths, layout, 2, 0);
  EXPECT_EQ(l0.cu_seqlens, (V{0, 2, 3, 6}));
  EXPECT_EQ(l0.storage_offsets, (V{0, 2, 3, 6}));
  EXPECT_FALSE(l0.has_padding());
  EXPECT_TRUE(l0.has_sharded_documents());
  const LocalTokens t0 = LocalTokensOf(Ids(8), l0);
  EXPECT_EQ(Values(t0.source_rows), (V{0, 1, 4, 5, 6, 7}));
  EXPECT_EQ(Values(t0.tokens), (V{100, 101, 104, 105, 106, 107}));
  EXPECT_EQ(Values(t0.positions), (V{0, 1, 4, 0, 1, 2}));
  // Row 1 (position 1) predicts position 2, which rank 1 holds; rows 2 and 5 end their
  // documents.
  EXPECT_EQ(Values(t0.targets.inputs), (V{0, 1, 3, 4}));
  EXPECT_EQ(Values(t0.targets.targets), (V{101, 102, 106, 107}));

  const LocalTokens t1 = LocalTokensOf(Ids(8), MakeLocalTokenLayout(lengths, layout, 2, 1));
  EXPECT_EQ(Values(t1.source_rows), (V{2, 3}));
  EXPECT_EQ(Values(t1.positions), (V{2, 3}));
  EXPECT_EQ(Values(t1.targets.inputs), (V{0, 1}));
  EXPECT_EQ(Values(t1.targets.targets), (V{103, 104}));
}

// The same micro-batch with every segment's storage rounded up to 4 rows: rank 0's
// segments of 2, 1 and 3 tokens start at rows 0, 4 and 8; the rows between are padding.
TEST(LocalTokensTest, InteriorPaddingHoldsNoTokenPositionOrTarget) {
  const LocalTokenLayout l0 =
      MakeLocalTokenLayout(V{5, 3}, CpLayoutFromPlaces({{kSharded}, {0}}, 2), 2, 0, 4);
  EXPECT_EQ(l0.cu_seqlens, (V{0, 2, 3, 6}));
  EXPECT_EQ(l0.storage_offsets, (V{0, 4, 8, 12}));
  EXPECT_TRUE(l0.has_padding());
  EXPECT_EQ(l0.real_tokens(), 6);
  EXPECT_EQ(l0.storage_tokens(), 12);
  const LocalTokens t0 = LocalTokensOf(Ids(8), l0);
  EXPECT_EQ(Values(t0.source_rows), (V{0, 1, -1, -1, 4, -1, -1, -1, 5, 6, 7, -1}));
  EXPECT_EQ(Values(t0.tokens), (V{100, 101, 0, 0, 104, 0, 0, 0, 105, 106, 107, 0}));
  EXPECT_EQ(Values(t0.positions), (V{0, 1, 0, 0, 4, 0, 0, 0, 0, 1, 2, 0}));
  EXPECT_EQ(Values(t0.targets.inputs), (V{0, 1, 8, 9}));
  EXPECT_EQ(Values(t0.targets.targets), (V{101, 102, 106, 107}));
}

// Over every rank of several layouts: each micro-batch row is held exactly once, at its
// position in its document, and the ranks' targets together are the whole batch's.
TEST(LocalTokensTest, RanksTogetherHoldTheMicroBatchAndItsTargetsOnce) {
  struct Case {
    int cp;
    V lengths;
    CpLayout layout;
    std::int64_t pad;
  };
  const std::vector<Case> cases = {
      {2, {13, 7, 5, 11}, CpLayoutFromPlaces({{kSharded}, {0}, {1}, {kSharded}}, 2), 1},
      {3, {17, 4, 9, 3}, CpLayoutFromPlaces({{kSharded}, {1}, {kSharded}, {kSharded}}, 3), 1},
      {3, {12, 5, 1}, CpLayoutFromPlaces({{0}, {1}, {kSharded}}, 3), 8},
      {3, {23, 2, 10}, CpLayoutFromPlaces({{kSharded}, {2}, {kSharded}}, 3), 3},
      {4, {23, 2, 10, 7}, CpLayoutFromPlaces({{0, 3}, {1, 2, 3}, {2}, {0, 1, 2}}, 4), 2},
      {1, {4, 6}, {}, 1}};
  for (const Case& c : cases) {
    PackedBatch batch;
    std::vector<std::vector<std::int64_t>> docs;
    std::int64_t total = 0;
    for (std::int64_t len : c.lengths) {
      docs.emplace_back();
      for (std::int64_t i = 0; i < len; ++i) docs.back().push_back(100 + total++);
    }
    batch = PackDocuments(docs, 100 + total);
    const at::Tensor positions = PositionsInDocuments(batch);
    const NextTokenTargets whole = NextTokenTargetsOf(batch);
    std::vector<int> held(static_cast<std::size_t>(total), 0);
    std::vector<std::int64_t> target_of(static_cast<std::size_t>(total), -1);
    std::int64_t targets = 0;
    for (int r = 0; r < c.cp; ++r) {
      const LocalTokens t =
          LocalTokensOf(batch.tokens, MakeLocalTokenLayout(c.lengths, c.layout, c.cp, r, c.pad));
      const V source = Values(t.source_rows), pos = Values(t.positions), ids = Values(t.tokens);
      for (std::size_t i = 0; i < source.size(); ++i) {
        if (source[i] < 0) continue;
        ++held[static_cast<std::size_t>(source[i])];
        EXPECT_EQ(pos[i], positions[source[i]].item<std::int64_t>());
        EXPECT_EQ(ids[i], 100 + source[i]);
      }
      const V inputs = Values(t.targets.inputs), next = Values(t.targets.targets);
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        target_of[static_cast<std::size_t>(source[static_cast<std::size_t>(inputs[i])])] = next[i];
      }
      targets += static_cast<std::int64_t>(inputs.size());
    }
    for (int h : held) EXPECT_EQ(h, 1);
    EXPECT_EQ(targets, batch.num_targets());
    const V whole_inputs = Values(whole.inputs), whole_targets = Values(whole.targets);
    for (std::size_t i = 0; i < whole_inputs.size(); ++i) {
      EXPECT_EQ(target_of[static_cast<std::size_t>(whole_inputs[i])], whole_targets[i]);
    }
  }
}

TEST(LocalTokensTest, BadInputsAreNamed) {
  EXPECT_THROW(MakeLocalTokenLayout(V{3, 0}, CpLayoutFromPlaces({{0}, {1}}, 2), 2, 0),
               InvalidInput);
  EXPECT_THROW(MakeLocalTokenLayout(V{3}, CpLayoutFromPlaces({{0}}, 2), 2, 0, 0), InvalidInput);
  // RankSegments' checks: a rank outside the group, a rank named twice.
  EXPECT_THROW(MakeLocalTokenLayout(V{3}, CpLayoutFromPlaces({{2}}, 2), 2, 0), InvalidInput);
  EXPECT_THROW(MakeLocalTokenLayout(V{3}, CpLayoutFromPlaces({{1, 1}}, 2), 2, 0), InvalidInput);
  const LocalTokenLayout l =
      MakeLocalTokenLayout(V{3, 4}, CpLayoutFromPlaces({{kSharded}, {1}}, 2), 2, 0);
  try {
    LocalTokensOf(Ids(6), l);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("7 ids"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hydraulis
