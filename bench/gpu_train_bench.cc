// Training throughput of the runtime on one device: a LLaMA-shaped model on packed batches
// of real document lengths (Wikipedia), bf16 on CUDA by default. Writes the batches it ran
// (bench/peer_train.py runs the same ones for the side-by-side comparison) and a JSON
// result with tokens/s and MFU. docs/benchmarks.md, "GPU training throughput".
//
// Data parallel: started by a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT (`torchrun --no-python --nproc-per-node 2 gpu_train_bench ...`), it trains one
// single-GPU pipeline per rank (dp = WORLD_SIZE). A step's micro-batches go to the ranks by
// tokens, largest first to the least-loaded rank; the batches file records which rank ran
// each one (`rank_of`), so bench/peer_train.py --impl ddp splits them the same way. Rank 0
// times the step and writes the outputs.
//
// FLOPs of a step (the MFU numerator): TrainingFlops (spec/model_flops.h) of its documents.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/launch/launcher.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/model_flops.h"

namespace hydraulis {
namespace {

struct Args {
  std::string model = "configs/models/llama-1b.json";
  std::string lengths = "../shared/data/wikipedia-doc-lengths.txt";
  std::string device = "cuda";
  std::string precision;
  std::int64_t context = 8192;
  std::int64_t tokens_per_step = 65536;
  int steps = 10;
  int warmup = 2;
  double peak_tflops = 989.0;  // H100/H200 SXM dense bf16
  std::uint64_t seed = 1;
  int port = 29611;
  std::string batches_out;
  std::string json_out;
  bool plain_allocator = false;
};

// First-fit decreasing into micro-batches of at most `context` tokens; the packing every
// pipeline of one scheme would use, enough for a one-device throughput figure.
std::vector<std::vector<int>> PackMicroBatches(const std::vector<std::int64_t>& lengths,
                                               std::int64_t context) {
  std::vector<int> order(lengths.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return lengths[static_cast<std::size_t>(a)] > lengths[static_cast<std::size_t>(b)];
  });
  std::vector<std::vector<int>> bins;
  std::vector<std::int64_t> used;
  for (int d : order) {
    const std::int64_t len = lengths[static_cast<std::size_t>(d)];
    std::size_t b = 0;
    while (b < bins.size() && used[b] + len > context) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      used.push_back(0);
    }
    bins[b].push_back(d);
    used[b] += len;
  }
  return bins;
}

// Rank of each micro-batch: largest first to the rank with the fewest tokens so far (ties to
// the lower rank), so data-parallel ranks get even work and every rank gets one when there
// are at least as many micro-batches as ranks.
std::vector<int> SpreadOverRanks(const std::vector<std::vector<int>>& mbs,
                                 const std::vector<std::int64_t>& lengths, int ranks) {
  std::vector<std::int64_t> size(mbs.size(), 0);
  for (std::size_t m = 0; m < mbs.size(); ++m)
    for (int d : mbs[m]) size[m] += lengths[static_cast<std::size_t>(d)];
  std::vector<std::size_t> order(mbs.size());
  for (std::size_t m = 0; m < order.size(); ++m) order[m] = m;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return size[a] > size[b]; });
  std::vector<std::int64_t> load(static_cast<std::size_t>(ranks), 0);
  std::vector<int> rank_of(mbs.size(), 0);
  for (std::size_t m : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    rank_of[m] = static_cast<int>(least);
    load[static_cast<std::size_t>(least)] += size[m];
  }
  return rank_of;
}

// Token ids by the formula bench/peer_train.py uses: (s * 1000003 + m * 7919 + p * 31)
// mod vocab for packed position p of micro-batch m of step s. Appends each micro-batch's
// document lengths to `step_json`.
std::vector<std::vector<std::int64_t>> SyntheticDocuments(int step,
                                                          const std::vector<std::vector<int>>& mbs,
                                                          const std::vector<std::int64_t>& lengths,
                                                          std::int64_t vocab,
                                                          nlohmann::json& step_json) {
  std::vector<std::vector<std::int64_t>> documents(lengths.size());
  for (std::size_t m = 0; m < mbs.size(); ++m) {
    std::int64_t p = 0;
    nlohmann::json mb_json = nlohmann::json::array();
    for (int d : mbs[m]) {
      auto& doc = documents[static_cast<std::size_t>(d)];
      for (std::int64_t i = 0; i < lengths[static_cast<std::size_t>(d)]; ++i, ++p) {
        doc.push_back((static_cast<std::int64_t>(step) * 1000003 +
                       static_cast<std::int64_t>(m) * 7919 + p * 31) %
                      vocab);
      }
      mb_json.push_back(lengths[static_cast<std::size_t>(d)]);
    }
    step_json.push_back(mb_json);
  }
  return documents;
}

// The micro-batches of each data-parallel rank; every rank must get one.
std::vector<MicroBatches> MicroBatchesPerRank(const std::vector<std::vector<int>>& mbs,
                                              const std::vector<int>& rank_of, int dp, int step) {
  std::vector<MicroBatches> per_rank(static_cast<std::size_t>(dp));
  for (std::size_t m = 0; m < mbs.size(); ++m)
    per_rank[static_cast<std::size_t>(rank_of[m])].push_back(mbs[m]);
  for (int r = 0; r < dp; ++r) {
    if (per_rank[static_cast<std::size_t>(r)].empty()) {
      throw InvalidInput("step " + std::to_string(step) + " packs " + std::to_string(mbs.size()) +
                         " micro-batches for " + std::to_string(dp) +
                         " data-parallel ranks; raise --tokens-per-step or lower --context");
    }
  }
  return per_rank;
}

// A step's loss, wall-clock time and the trainer's phases.
nlohmann::json StepRecord(const DistributedStepResult& r, double seconds) {
  return {{"loss", r.loss},
          {"step_ms", seconds * 1e3},
          {"phases_ms",
           {{"check", r.check_ms},
            {"pack", r.pack_ms},
            {"materialise", r.materialise_ms},
            {"forward", r.forward_ms},
            {"backward", r.backward_ms},
            {"grad_collect", r.grad_collect_ms},
            {"grad_reduce_wait", r.grad_reduce_wait_ms},
            {"update", r.update_ms},
            {"pipeline_wait", r.wait_ms},
            {"step", r.step_ms}}}};
}

// One rank alone on a.port, or the job torchrun describes; NCCL between GPUs.
DistributedOptions RanksOf(const Args& a, const ComputeOptions& compute) {
  DistributedOptions dist;
  dist.master_port = a.port;
  if (std::getenv("WORLD_SIZE") != nullptr) dist = DistributedOptionsFromEnvironment();
  if (compute.device == DeviceKind::kCuda) dist.backend = CommBackend::kNccl;
  dist.device_index = compute.device_index;
  return dist;
}

// The timed steps' throughput (MFU on a GPU only) and every step's record.
nlohmann::json Summary(const Args& a, const ComputeOptions& compute, int dp, double timed_s,
                       double timed_tokens, double timed_flops, const nlohmann::json& steps) {
  const bool cuda = compute.device == DeviceKind::kCuda;
  return {{"impl", "hydraulis"},
          {"device", Describe(compute)},
          {"model", a.model},
          {"dp", dp},
          {"torch", TorchBuildDescription()},
          {"steps_timed", a.steps},
          {"tokens", timed_tokens},
          {"seconds", timed_s},
          {"tokens_per_s", timed_tokens / timed_s},
          {"flops_per_s", timed_flops / timed_s},
          {"mfu", cuda ? nlohmann::json(timed_flops / timed_s / (a.peak_tflops * 1e12))
                       : nlohmann::json()},
          {"steps", steps}};
}

void PrintThroughput(const Args& a, const ComputeOptions& compute, double timed_s,
                     double timed_tokens, double timed_flops) {
  const bool cuda = compute.device == DeviceKind::kCuda;
  std::printf("hydraulis: %.0f tokens/s, %.1f TFLOP/s%s\n", timed_tokens / timed_s,
              timed_flops / timed_s / 1e12,
              cuda ? (", MFU " +
                      std::to_string(timed_flops / timed_s / (a.peak_tflops * 1e12) * 100) + " %")
                         .c_str()
                   : "");
}

int Run(const Args& a) {
  const ModelConfig config = LoadModelConfig(a.model);
  const ComputeOptions compute = ResolveComputeOptions(
      a.device, a.precision, ParseLocalRank(std::getenv("LOCAL_RANK")), "--device", "--precision");
  UseDevice(compute);  // before the first CUDA call: the rendezvous' NCCL groups, the model
  const std::vector<std::int64_t> dataset = ReadLengths(a.lengths);
  SamplerOptions sampling;
  sampling.tokens_per_batch = a.tokens_per_step;
  sampling.max_len = a.context;
  sampling.seed = a.seed;
  BatchSampler sampler(dataset, sampling);

  const DistributedOptions dist = RanksOf(a, compute);
  const int dp = dist.world_size;
  const bool lead = dist.rank == 0;
  Rendezvous rendezvous(dist);
  Strategy data_parallel;
  data_parallel.pipelines.assign(static_cast<std::size_t>(dp), Scheme{});
  AdamWOptions adam;
  adam.lr = 1e-4;
  DistributedTrainer trainer(config, a.seed, adam, rendezvous, {data_parallel}, compute);

  nlohmann::json batches = {{"format", "hydraulis-batches-v1"},
                            {"vocab", config.shape.vocab},
                            {"dp", dp},
                            {"steps", nlohmann::json::array()},
                            {"rank_of", nlohmann::json::array()}};
  nlohmann::json steps = nlohmann::json::array();
  double timed_s = 0, timed_tokens = 0, timed_flops = 0;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    const SampledBatch batch = sampler.Next();
    const std::vector<std::vector<int>> mbs = PackMicroBatches(batch.lengths, a.context);
    nlohmann::json step_json = nlohmann::json::array();
    const std::vector<std::vector<std::int64_t>> documents =
        SyntheticDocuments(step, mbs, batch.lengths, config.shape.vocab, step_json);
    batches["steps"].push_back(step_json);
    const std::vector<int> rank_of = SpreadOverRanks(mbs, batch.lengths, dp);
    batches["rank_of"].push_back(rank_of);
    const std::vector<MicroBatches> per_rank = MicroBatchesPerRank(mbs, rank_of, dp, step);
    SynchronizeDevice(compute);  // the previous step's queued work is not this one's
    const auto start = std::chrono::steady_clock::now();
    // One pipeline running the packed micro-batches. Step returns after its last host read
    // (the gradient norm), with the AdamW update still queued: the clock stops after it.
    const DistributedStepResult r = trainer.Step(PlanOf(0, per_rank), documents);
    SynchronizeDevice(compute);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double tokens = 0;
    for (std::int64_t len : batch.lengths) tokens += static_cast<double>(len);
    const double flops = TrainingFlops(config, batch.lengths);
    nlohmann::json record = StepRecord(r, seconds);
    record["step"] = step;
    record["warmup"] = step < a.warmup;
    record["tokens"] = tokens;
    record["micro_batches"] = mbs.size();
    record["flops"] = flops;
    steps.push_back(std::move(record));
    if (lead) {
      std::printf("step %3d%s  loss %.4f  tokens %6.0f  micro-batches %2zu  %8.1f ms\n", step,
                  step < a.warmup ? " (warmup)" : "", r.loss, tokens, mbs.size(), seconds * 1e3);
      std::fflush(stdout);
    }
    if (step >= a.warmup) {
      timed_s += seconds;
      timed_tokens += tokens;
      timed_flops += flops;
    }
  }
  const nlohmann::json result = Summary(a, compute, dp, timed_s, timed_tokens, timed_flops, steps);
  if (lead) PrintThroughput(a, compute, timed_s, timed_tokens, timed_flops);
  if (lead && !a.batches_out.empty()) std::ofstream(a.batches_out) << batches.dump() << '\n';
  if (lead && !a.json_out.empty()) std::ofstream(a.json_out) << result.dump(1) << '\n';
  trainer.world().Barrier();
  return 0;
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  hydraulis::Args a;
  CLI::App app{"Training throughput of the hydraulis runtime on one device"};
  app.add_option("--model", a.model, "model config JSON")->capture_default_str();
  app.add_option("--lengths", a.lengths, "document lengths (real data)")->capture_default_str();
  app.add_option("--device", a.device, "cpu or cuda")->capture_default_str();
  app.add_option("--precision", a.precision, "fp32 or bf16 (default: bf16 on cuda)");
  app.add_option("--context", a.context, "micro-batch capacity and document cut (tokens)")
      ->capture_default_str();
  app.add_option("--tokens-per-step", a.tokens_per_step, "tokens per step")->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--peak-tflops", a.peak_tflops, "device peak for MFU")->capture_default_str();
  app.add_option("--port", a.port, "rendezvous port")->capture_default_str();
  app.add_option("--batches-out", a.batches_out, "write the batches run (for peer_train.py)");
  app.add_option("--json", a.json_out, "write the result");
  app.add_flag("--plain-allocator", a.plain_allocator,
               "keep glibc's default malloc settings (by default the bench restarts itself under "
               "the ones `hydraulis train` runs with, unless GLIBC_TUNABLES is set)");
  CLI11_PARSE(app, argc, argv);
  // The trainer as `hydraulis train` runs it: freed memory kept for reuse (launcher.h).
  if (!a.plain_allocator && std::getenv("GLIBC_TUNABLES") == nullptr) {
    hydraulis::RestartSelfWith({{"GLIBC_TUNABLES", hydraulis::kAllocatorTunables}},
                               std::vector<std::string>(argv, argv + argc));
  }
  try {
    return hydraulis::Run(a);
  } catch (const hydraulis::InvalidInput& e) {
    std::fprintf(stderr, "gpu_train_bench: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_train_bench: %s\n", e.what());
    return 1;
  }
}
