// Context-parallel attention over real Gloo ranks (threads of this process, each with its
// own rendezvous connection and group): every rank's output and the gradients of its q, k
// and v equal, row by row, one process's PackedCausalAttention over the whole micro-batch.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

#include "hydraulis/runtime/communication/comm_group.h"
#include "runtime/testing/context_parallel_case.h"
#include "runtime/testing/rank_harness.h"

namespace hydraulis {
namespace {

using test_support::CpCase;
using test_support::CpResult;

// fp32 throughout: the ranks compute each query's softmax over the same keys as one
// process, only with another summation order in the gradients of shared keys.
constexpr double kTolerance = 1e-5;

// `dtype` is the ranks' (the reference is fp32 always).
void ExpectGlooRanksMatchOneProcess(const CpCase& c, at::ScalarType dtype = at::kFloat,
                                    double tolerance = kTolerance) {
  SCOPED_TRACE(c.name);
  const CpResult reference = test_support::CpReference(test_support::MakeCpData(c));
  const test_support::CpData data =
      test_support::MakeCpData(c, 5, at::TensorOptions().dtype(dtype));
  std::vector<CpResult> ranks(static_cast<std::size_t>(c.cp));
  const int port = test_support::FreePort();
  test_support::OnThreads(c.cp, [&](int r) {
    DistributedOptions o;
    o.rank = r;
    o.world_size = c.cp;
    o.master_port = port;
    o.timeout = std::chrono::seconds(30);
    Rendezvous rendezvous(o);
    std::unique_ptr<CommGroup> group = MakeCommGroup(rendezvous, "cp");
    ranks[static_cast<std::size_t>(r)] = test_support::CpRankRun(c, data, *group);
    group->Barrier();  // no rank takes the store down while another still needs it
  });
  const double error = test_support::ExpectRanksMatchReference(ranks, reference, tolerance);
  std::cout << "[ cp=" << c.cp << " " << c.name << " ] max relative error " << error << "\n";
}

TEST(ContextParallelAttentionTest, TwoRanksMixOfShardedAndPlacedOddLengths) {
  ExpectGlooRanksMatchOneProcess({"mixed odd lengths",
                                  2,
                                  {13, 7, 5, 11},
                                  CpLayoutFromPlaces({{kSharded}, {0}, {1}, {kSharded}}, 2),
                                  4,
                                  2,
                                  8,
                                  1});
}

TEST(ContextParallelAttentionTest, ThreeRanksWithEmptyChunks) {
  // Document 3 (3 tokens) and document 2 (9 tokens over 6 chunks) leave some chunks empty
  // or of one token; heads 6 over 2 kv heads.
  ExpectGlooRanksMatchOneProcess({"empty chunks",
                                  3,
                                  {17, 4, 9, 3},
                                  CpLayoutFromPlaces({{kSharded}, {1}, {kSharded}, {kSharded}}, 3),
                                  6,
                                  2,
                                  8,
                                  1});
}

TEST(ContextParallelAttentionTest, ThreeRanksOneWithoutAnyToken) {
  // Rank 2 holds nothing (the one-token sharded document lies on rank 0 alone), rank 1
  // only a placed document: both must still join the gather and its reduce-scatter.
  ExpectGlooRanksMatchOneProcess(
      {"idle rank", 3, {12, 5, 1}, CpLayoutFromPlaces({{0}, {1}, {kSharded}}, 3), 4, 1, 8, 1});
}

TEST(ContextParallelAttentionTest, TwoRanksWithoutShardedDocument) {
  ExpectGlooRanksMatchOneProcess(
      {"nothing sharded", 2, {6, 9, 4}, CpLayoutFromPlaces({{1}, {1}, {1}}, 2), 4, 2, 8, 1});
}

TEST(ContextParallelAttentionTest, InteriorPaddingIsNeverRead) {
  // Every segment's storage is rounded up to 4 (cp 2) or 8 (cp 3) rows; the padding rows
  // hold NaN, so reading one would poison the outputs.
  ExpectGlooRanksMatchOneProcess({"padding 4",
                                  2,
                                  {13, 6, 9, 2},
                                  CpLayoutFromPlaces({{kSharded}, {0}, {kSharded}, {1}}, 2),
                                  4,
                                  2,
                                  8,
                                  4});
  ExpectGlooRanksMatchOneProcess({"padding 8",
                                  3,
                                  {23, 2, 10},
                                  CpLayoutFromPlaces({{kSharded}, {2}, {kSharded}}, 3),
                                  3,
                                  1,
                                  8,
                                  8});
}

// Documents over subsets of four ranks: widths 1 to 4 side by side, rank sets that are not
// contiguous ({0, 2}, {0, 1, 3}), a 3-token document over three ranks (empty chunks), and
// a rank (2) that holds only a whole document yet joins the gather.
TEST(ContextParallelAttentionTest, FourRanksWithSubsetsOfEveryWidth) {
  ExpectGlooRanksMatchOneProcess(
      {"subsets",
       4,
       {21, 3, 14, 9, 30, 5},
       CpLayoutFromPlaces({{0, 2}, {0, 1, 3}, {kSharded}, {2}, {1, 3}, {3}}, 4),
       4,
       2,
       8,
       1});
  ExpectGlooRanksMatchOneProcess({"subsets padded",
                                  4,
                                  {21, 3, 14, 9},
                                  CpLayoutFromPlaces({{1, 2, 3}, {0}, {0, 3}, {1, 2}}, 4),
                                  4,
                                  2,
                                  8,
                                  4});
}

TEST(ContextParallelAttentionTest, ThreeRanksLongDocumentAlone) {
  ExpectGlooRanksMatchOneProcess(
      {"one long document", 3, {64}, CpLayoutFromPlaces({{kSharded}}, 3), 4, 4, 16, 1});
}

// bf16 ranks against the fp32 reference: Gloo carries the bf16 gather and reduce-scatter
// (the GPU path stages its bf16 tensors through them too). bf16 rounds q, k, v, the output
// and the gradients to 2^-8 relative; 2e-2 of the scale bounds a few roundings, while a
// wrong row or mask gives errors of order 1.
TEST(ContextParallelAttentionTest, Bf16RanksTrackFp32) {
  ExpectGlooRanksMatchOneProcess({"bf16",
                                  3,
                                  {17, 4, 9, 3},
                                  CpLayoutFromPlaces({{kSharded}, {1}, {kSharded}, {kSharded}}, 3),
                                  6,
                                  2,
                                  8,
                                  4},
                                 at::kBFloat16, 2e-2);
}

}  // namespace
}  // namespace hydraulis
