// Tests that need a CUDA GPU (scripts/gpu-check.sh runs them on one); each skips where
// none is visible, unless HYDRAULIS_REQUIRE_GPU is set (the GPU check sets it): then a
// missing GPU fails every one of them, so a check that saw no GPU cannot report a pass.
// Tolerances:
//  - flash vs dense attention in bf16: both round q, k, v and the output to bf16 (relative
//    step 2^-8 = 3.9e-3) and accumulate differently; 2e-2 of the output's scale bounds a
//    few roundings, while a wrong mask, grouping or boundary gives errors of order 1.
//  - 20 bf16 steps vs fp32 on the CPU: per-step losses within 2e-2 relative (bf16
//    activations through 2 layers and a 256-way softmax; the fp32 master weights keep the
//    runs from drifting apart, which the final-loss bound checks).
//  - CUDA fp32 over Gloo (two ranks on one GPU) vs one CPU process: 1e-4, the CPU tests'
//    1e-5 loosened for cuBLAS' different summation order and TF32-free fp32 GEMMs.
//  - NCCL vs Gloo on the same GPU: the first step's loss (forward only, same weights, same
//    kernels) within 1e-6; later steps within 1e-4. A CUDA embedding backward adds rows
//    with atomics in no fixed order, so two runs' gradients differ in the last bits, and
//    AdamW's normalised step turns a last-bit difference of a near-zero gradient into a
//    visible one; an exact comparison would fail on a correct build.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/AutogradState.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/attention.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/spec/model_config.h"
#include "runtime/testing/context_parallel_case.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/reference_trainer.h"
#include "runtime/testing/test_documents.h"

namespace hydraulis {
namespace {

using test_support::Documents;
using test_support::OnThreads;
using test_support::RandomDocuments;

// Set (to anything but "" or "0") where a GPU must be there: the GPU check.
bool GpuRequired() {
  const char* v = std::getenv("HYDRAULIS_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

#define REQUIRE_GPU()                                                                          \
  if (CudaDeviceCount() == 0) {                                                                \
    if (GpuRequired()) FAIL() << "no CUDA GPU visible here, and HYDRAULIS_REQUIRE_GPU is set"; \
    GTEST_SKIP() << "no CUDA GPU visible here";                                                \
  }                                                                                            \
  static_assert(true)

ModelConfig Tiny() {
  return LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
}

ComputeOptions Cuda(Precision precision) {
  ComputeOptions c;
  c.device = DeviceKind::kCuda;
  c.precision = precision;
  return c;
}

double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor fa = a.to(at::kDouble).cpu(), fb = b.to(at::kDouble).cpu();
  const double scale = fb.abs().max().item<double>();
  return (fa - fb).abs().max().item<double>() / (scale > 0.0 ? scale : 1.0);
}

// Real Wikipedia-like shapes: one long document, several short ones, a 1-token one.
const std::vector<std::int64_t> kCuSeqlens = {0, 700, 701, 950, 1000, 1513, 1600};

TEST(GpuTest, FlashVarlenAttentionEqualsDenseAttentionPerDocument) {
  REQUIRE_GPU();
  const std::int64_t tokens = kCuSeqlens.back(), heads = 8, kv_heads = 2, dim = 64;
  at::manual_seed(3);
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::Tensor q = at::randn({tokens, heads, dim}, opts).requires_grad_(true);
  at::Tensor k = at::randn({tokens, kv_heads, dim}, opts).requires_grad_(true);
  at::Tensor v = at::randn({tokens, kv_heads, dim}, opts).requires_grad_(true);
  ASSERT_TRUE(UsesFlashAttention(q.device(), q.scalar_type(), dim));
  at::Tensor out = PackedCausalAttention(q, k, v, kCuSeqlens);
  const at::Tensor qd = q.detach().to(at::kFloat).requires_grad_(true);
  const at::Tensor kd = k.detach().to(at::kFloat).requires_grad_(true);
  const at::Tensor vd = v.detach().to(at::kFloat).requires_grad_(true);
  at::Tensor dense = DenseCausalAttention(qd, kd, vd, kCuSeqlens);
  EXPECT_LT(RelativeError(out, dense), 2e-2);
  const at::Tensor grad = at::randn({tokens, heads, dim}, opts);
  out.backward(grad);
  dense.backward(grad.to(at::kFloat));
  EXPECT_LT(RelativeError(q.grad(), qd.grad()), 2e-2);
  EXPECT_LT(RelativeError(k.grad(), kd.grad()), 2e-2);
  EXPECT_LT(RelativeError(v.grad(), vd.grad()), 2e-2);
}

// Context parallelism's shape of call: query chunks against longer key prefixes, the
// causal mask aligned to the bottom right (flash-attention 2.1+), against the dense
// reference, which the CPU tests check against whole-document attention.
TEST(GpuTest, FlashVarlenBottomRightEqualsDense) {
  REQUIRE_GPU();
  const std::int64_t heads = 8, kv_heads = 2, dim = 64;
  // Queries: 300 of 700 keys, 1 of 1, 60 of 513, 87 of 87.
  const std::vector<std::int64_t> cu_q = {0, 300, 301, 361, 448};
  const std::vector<std::int64_t> cu_k = {0, 700, 701, 1214, 1301};
  at::manual_seed(4);
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::Tensor q = at::randn({cu_q.back(), heads, dim}, opts).requires_grad_(true);
  at::Tensor k = at::randn({cu_k.back(), kv_heads, dim}, opts).requires_grad_(true);
  at::Tensor v = at::randn({cu_k.back(), kv_heads, dim}, opts).requires_grad_(true);
  at::Tensor out = VarlenCausalAttention(q, k, v, cu_q, cu_k);
  const at::Tensor qd = q.detach().to(at::kFloat).requires_grad_(true);
  const at::Tensor kd = k.detach().to(at::kFloat).requires_grad_(true);
  const at::Tensor vd = v.detach().to(at::kFloat).requires_grad_(true);
  at::Tensor dense = DenseVarlenCausalAttention(qd, kd, vd, cu_q, cu_k);
  EXPECT_LT(RelativeError(out, dense), 2e-2);
  const at::Tensor grad = at::randn({cu_q.back(), heads, dim}, opts);
  out.backward(grad);
  dense.backward(grad.to(at::kFloat));
  EXPECT_LT(RelativeError(q.grad(), qd.grad()), 2e-2);
  EXPECT_LT(RelativeError(k.grad(), kd.grad()), 2e-2);
  EXPECT_LT(RelativeError(v.grad(), vd.grad()), 2e-2);
}

// Context-parallel attention in bf16 on the GPU (flash attention; Gloo stages the K/V
// gather and the gradient's reduce-scatter through the host; one document over a subset of
// two of the three ranks), three rank threads on one
// GPU, against one CPU process in fp32; bf16 tolerance as above.
TEST(GpuTest, ContextParallelAttentionBf16MatchesCpuFp32) {
  REQUIRE_GPU();
  const test_support::CpCase c{"gpu cp3",
                               3,
                               {700, 33, 250, 5, 901},
                               CpLayoutFromPlaces({{kSharded}, {1}, {0, 2}, {2}, {kSharded}}, 3),
                               8,
                               2,
                               64,
                               8};
  const test_support::CpResult reference = test_support::CpReference(test_support::MakeCpData(c));
  const test_support::CpData data =
      test_support::MakeCpData(c, 5, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  std::vector<test_support::CpResult> ranks(3);
  const int port = test_support::FreePort();
  OnThreads(3, [&](int r) {
    DistributedOptions o;
    o.rank = r;
    o.world_size = 3;
    o.master_port = port;
    o.timeout = std::chrono::seconds(60);
    Rendezvous rendezvous(o);
    std::unique_ptr<CommGroup> group = MakeCommGroup(rendezvous, "cp");
    ranks[static_cast<std::size_t>(r)] = test_support::CpRankRun(c, data, *group);
    group->Barrier();
  });
  test_support::ExpectRanksMatchReference(ranks, reference, 2e-2);
}

// Options for a one-rank DistributedTrainer (the runtime's optimizer path).
DistributedOptions OneRank(CommBackend backend) {
  DistributedOptions o;
  o.master_port = test_support::FreePort();
  o.timeout = std::chrono::seconds(60);
  o.backend = backend;
  return o;
}

Strategy Single(int tp, int pp, int pipelines, int cp = 1) {
  Strategy s;
  Scheme scheme;
  scheme.tp = tp;
  scheme.pp = pp;
  scheme.cp = cp;
  s.pipelines.assign(static_cast<std::size_t>(pipelines), scheme);
  return s;
}

// The documents of step `s`, and a plan putting them in two micro-batches of one pipeline.
Documents StepDocuments(int s, const ModelConfig& c) {
  return RandomDocuments({90, 3, 40, 17, 120, 1, 33, 64}, 100 + static_cast<std::uint64_t>(s),
                         static_cast<int>(c.shape.vocab));
}
Plan TwoMicroBatches() { return PlanOf(0, {{{0, 1, 2, 3}, {4, 5, 6, 7}}}); }

// TwoMicroBatches for one cp = 2 pipeline: in each micro-batch two documents are sharded
// (odd lengths 17 and 33, the 1-token one) and the others placed whole on either rank.
Plan TwoMicroBatchesOnTwoCpRanks() {
  Plan plan = TwoMicroBatches();
  plan.pipelines[0].cp_layouts = {CpLayoutFromPlaces({{kSharded}, {0}, {1}, {kSharded}}, 2),
                                  CpLayoutFromPlaces({{kSharded}, {kSharded}, {1}, {0}}, 2)};
  return plan;
}

// The losses of `steps` steps on one rank; with `repeat` every step trains on step 0's
// documents, which the model can learn (the random tokens of new documents every step
// leave nothing to learn: the loss stays near ln(vocab)).
std::vector<double> TrainLosses(const ComputeOptions& compute, CommBackend backend, int steps,
                                bool repeat = false) {
  const ModelConfig c = Tiny();
  Rendezvous rendezvous(OneRank(backend));
  AdamWOptions adam;
  adam.lr = 3e-3;
  DistributedTrainer trainer(c, 11, adam, rendezvous, {Single(1, 1, 1)}, compute);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    losses.push_back(trainer.Step(TwoMicroBatches(), StepDocuments(repeat ? 0 : s, c)).loss);
  }
  return losses;
}

// The CPU reference of the test below learns (runs everywhere: the first GPU run found this
// test asserting learning on new random documents every step, which the CPU run failed too).
TEST(GpuTest, CpuReferenceLearnsRepeatedDocuments) {
  const std::vector<double> reference = TrainLosses({}, CommBackend::kGloo, 20, true);
  EXPECT_LT(reference.back(), 0.9 * reference.front());
}

TEST(GpuTest, Bf16TrainingTracksCpuFp32For20Steps) {
  REQUIRE_GPU();
  const std::vector<double> reference = TrainLosses({}, CommBackend::kGloo, 20, true);
  const std::vector<double> bf16 =
      TrainLosses(Cuda(Precision::kBf16), CommBackend::kGloo, 20, true);
  double worst = 0.0;
  for (std::size_t s = 0; s < reference.size(); ++s) {
    worst = std::max(worst, std::abs(bf16[s] - reference[s]) / reference[s]);
  }
  std::cout << "[ bf16 vs fp32 ] losses " << reference.front() << " -> " << reference.back()
            << " (fp32), " << bf16.front() << " -> " << bf16.back()
            << " (bf16); worst relative difference " << worst << "\n";
  EXPECT_LT(worst, 2e-2);
  EXPECT_LT(reference.back(), 0.9 * reference.front());  // it learned
  EXPECT_LT(bf16.back(), 0.9 * bf16.front());
}

TEST(GpuTest, NcclRunsWithWorldSizeOne) {
  REQUIRE_GPU();
  Rendezvous rendezvous(OneRank(CommBackend::kNccl));
  std::unique_ptr<CommGroup> world = MakeCommGroup(rendezvous, "world");
  const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  at::Tensor t = at::arange(4, cuda);
  world->AllReduceSum(t);
  EXPECT_TRUE(at::equal(t.cpu(), at::arange(4, at::kFloat)));
  at::Tensor shard = at::empty({4}, cuda);
  world->ReduceScatterSum(t, shard);
  at::Tensor full = at::empty({4}, cuda);
  world->AllGather(shard, full);
  EXPECT_TRUE(at::equal(full.cpu(), at::arange(4, at::kFloat)));
  at::Tensor host = at::ones({2}, at::kLong);  // staged through the GPU
  world->AllReduceMax(host);
  EXPECT_TRUE(at::equal(host, at::ones({2}, at::kLong)));
  world->Barrier();
  // And a training step through NCCL equals one through Gloo on the same GPU.
  const std::vector<double> nccl = TrainLosses(Cuda(Precision::kFp32), CommBackend::kNccl, 3);
  const std::vector<double> gloo = TrainLosses(Cuda(Precision::kFp32), CommBackend::kGloo, 3);
  for (std::size_t s = 0; s < nccl.size(); ++s) {
    EXPECT_NEAR(nccl[s], gloo[s], (s == 0 ? 1e-6 : 1e-4) * gloo[s]) << "step " << s;
  }
}

// Two ranks (threads) on the one GPU over Gloo with CUDA tensors (NCCL refuses two ranks on
// one device): tensor, pipeline and context parallelism train like one CPU process.
// `tolerance` bounds each step's loss relative to the CPU's; in fp32 the parameters of the
// two ranks must also be equal.
void ExpectTwoRanksOnOneGpuMatchCpu(int tp, int pp, const ComputeOptions& compute, int cp = 1,
                                    double tolerance = 1e-4) {
  const ModelConfig c = Tiny();
  const std::vector<double> reference = TrainLosses({}, CommBackend::kGloo, 3);
  const Plan plan = cp == 1 ? TwoMicroBatches() : TwoMicroBatchesOnTwoCpRanks();
  const int port = test_support::FreePort();
  std::vector<std::vector<double>> losses(2);
  std::vector<at::Tensor> params(2);
  OnThreads(2, [&](int r) {
    DistributedOptions o;
    o.rank = r;
    o.world_size = 2;
    o.master_port = port;
    o.timeout = std::chrono::seconds(60);
    Rendezvous rendezvous(o);
    AdamWOptions adam;
    adam.lr = 3e-3;
    DistributedTrainer trainer(c, 11, adam, rendezvous, {Single(tp, pp, 1, cp)}, compute);
    for (int s = 0; s < 3; ++s) {
      losses[r].push_back(trainer.Step(plan, StepDocuments(s, c)).loss);
    }
    params[r] = trainer.optimizer().full_parameters().cpu();
    trainer.world().Barrier();
  });
  EXPECT_TRUE(at::equal(params[0], params[1]));
  for (int r = 0; r < 2; ++r) {
    for (std::size_t s = 0; s < reference.size(); ++s) {
      EXPECT_NEAR(losses[r][s], reference[s], tolerance * reference[s])
          << "rank " << r << " step " << s;
    }
  }
}

TEST(GpuTest, TwoRanksOnOneGpuTensorParallelMatchCpu) {
  REQUIRE_GPU();
  ExpectTwoRanksOnOneGpuMatchCpu(2, 1, Cuda(Precision::kFp32));
}

TEST(GpuTest, TwoRanksOnOneGpuPipelineParallelMatchCpu) {
  REQUIRE_GPU();
  ExpectTwoRanksOnOneGpuMatchCpu(1, 2, Cuda(Precision::kFp32));
}

// Context parallelism on CUDA: in fp32 the cp attention's gather and gradient reduction over
// Gloo (staged through the host); in bf16 also the flash kernel's bottom-right varlen call
// inside training (bf16 tolerance as for Bf16TrainingTracksCpuFp32For20Steps).
TEST(GpuTest, TwoCpRanksOnOneGpuMatchCpu) {
  REQUIRE_GPU();
  ExpectTwoRanksOnOneGpuMatchCpu(1, 1, Cuda(Precision::kFp32), 2);
  ExpectTwoRanksOnOneGpuMatchCpu(1, 1, Cuda(Precision::kBf16), 2, 2e-2);
}

// The same harness on the CPU (runs everywhere): ranks as threads of one process, each
// with its own rendezvous client, so a GPU run of the tests above exercises checked code.
TEST(GpuTest, TwoRankThreadsOnTheCpuMatchOneProcess) {
  ExpectTwoRanksOnOneGpuMatchCpu(2, 1, {});
  ExpectTwoRanksOnOneGpuMatchCpu(1, 2, {});
  ExpectTwoRanksOnOneGpuMatchCpu(1, 1, {}, 2, 1e-5);
}

// Each rank thread runs its own backward passes (autograd's device threads are off for it),
// and the test's own thread keeps autograd's default.
TEST(GpuTest, RankThreadsRunTheirOwnBackward) {
  std::vector<int> multithreaded(2, -1);
  OnThreads(2, [&](int r) {
    multithreaded[static_cast<std::size_t>(r)] =
        c10::AutogradState::get_tls_state().get_multithreading_enabled() ? 1 : 0;
  });
  EXPECT_EQ(multithreaded, std::vector<int>({0, 0}));
  EXPECT_TRUE(c10::AutogradState::get_tls_state().get_multithreading_enabled());
}

TEST(GpuTest, CudaRequestWithoutAGpuIsAClearError) {
  if (CudaDeviceCount() > 0) {
    ComputeOptions beyond = Cuda(Precision::kBf16);
    beyond.device_index = CudaDeviceCount();
    EXPECT_THROW(CheckComputeAvailable(beyond), InvalidInput);
    return;
  }
  try {
    CheckComputeAvailable(Cuda(Precision::kBf16));
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hydraulis
