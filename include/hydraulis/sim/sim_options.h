// Configuration of a simulated training run: which system plans the steps, how batches are
// sampled, and the explicit communication and optimizer-step cost model
// (docs/simulator.md gives every formula).
#pragma once

#include <cstdint>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/pipeline_time.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/sim/system.h"
#include "hydraulis/spec/ddp_buckets.h"

namespace hydraulis {

// Communication cost model. Bandwidths are per direction; GB and Gb are 1e9 bytes / bits.
struct CommOptions {
  // false: every communication term (point-to-point sends, materialisation,
  // reduce-scatter) takes 0 ms, which is the planner's view of a step.
  bool enabled = true;
  // NVLink bandwidth from one GPU to another GPU of its node, GB/s (> 0). A800: 400.
  double nvlink_gbytes_per_s = 400.0;
  // Network bandwidth of one node (all its NICs together) to other nodes, Gb/s (> 0).
  // A800 nodes: 4 x 200 Gb/s. A single GPU's point-to-point share is this divided by the
  // GPUs per node (two GPUs share one NIC).
  double network_gbits_per_s_per_node = 800.0;
  // Latency of one point-to-point activation or activation-gradient message, us (>= 0).
  double p2p_latency_us = 10.0;
  // Latency of one collective phase, us (>= 0); materialisation and reduce-scatter each
  // have an intra-node and an inter-node phase.
  double collective_latency_us = 50.0;
  // Bytes per activation value sent between pipeline stages (bf16: 2; > 0).
  double activation_bytes_per_value = 2.0;
  // Bytes per parameter materialised into the compute layout (bf16: 2; > 0).
  double param_bytes_per_param = 2.0;
  // Bytes per gradient value reduce-scattered into the optimizer shards (bf16: 2; > 0).
  double grad_bytes_per_param = 2.0;
  // true: the parameter all-gather and the gradient reduce-scatter run bucket by bucket,
  // overlapped with forward and backward as the runtime runs them (Megatron's
  // --overlap-param-gather and --overlap-grad-reduce); false: each is a phase of its own
  // before and after compute, one collective each (the serial model).
  bool overlap = true;
  // Parameters per bucket of the overlapped collectives (>= 1; the runtime's and
  // Megatron's --ddp-bucket-size, 40M by default). At most 65,536 buckets, as the runtime.
  std::int64_t bucket_elements = kDefaultBucketElements;
};

// Time of the optimizer step on the optimizer shards (every GPU in parallel).
struct OptimizerStepOptions {
  // A fixed optimizer-step time, ms; < 0 derives it from the memory traffic below.
  double fixed_ms = -1.0;
  // HBM bytes an Adam step moves per parameter (> 0): fp32 master weight, exp_avg and
  // exp_avg_sq each read and written (24), the gradient read (4, fp32 main gradient), the
  // bf16 copy written (2).
  double bytes_per_param = 30.0;
  // Effective HBM bandwidth of one GPU, GB/s (> 0); A800 peak is 2,039, ~80 % is achieved
  // by a fused Adam.
  double hbm_gbytes_per_s = 1600.0;
};

struct SimOptions {
  System system = System::kOurs;
  int steps = 1;                   // global batches to simulate (>= 1)
  SamplerOptions sampler;          // token budget, context length (max_len) and sampler seed
  std::uint64_t planner_seed = 1;  // the published planner's randomised greedy
  ScheduleOptions schedule;        // forward:backward split of a stage's time
  CommOptions comm;
  OptimizerStepOptions optimizer;
  // Ours adds each candidate's modelled synchronisation (materialise + reduce-scatter) to
  // its estimated step time when choosing the strategy (method.md section 4). Off: ours
  // chooses on compute time alone, like the published planner.
  bool sync_aware = true;
  // The layouts cp > 1 pipelines may use (static-cp always shards every document).
  CpLayoutSpace cp_layout_space = CpLayoutSpace::kAnySubset;
};

// InvalidInput naming the field and value of the first out-of-range option.
void ValidateSimOptions(const SimOptions& options);

}  // namespace hydraulis
