#include "simulate_args.h"

#include "number_flags.h"
#include "output_paths.h"

namespace hydraulis::tools {

void SimulateArgs::AddTo(CLI::App* cmd) {
  SimOptions& o = options;
  inputs.AddTo(cmd);
  source.AddTo(cmd);
  cmd->add_option("--lengths", lengths, "length dataset to sample the global batches from")
      ->required();
  cmd->add_option("--steps", o.steps, "global batches to simulate (at most 1000000)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tokens-per-batch", o.sampler.tokens_per_batch,
                  "token budget of a global batch")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--max-len", o.sampler.max_len,
                  "context length: documents are cut to it; static bin and padding size")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option(
         "--system", system,
         "padding, static-fixed, static-balanced, static-cp, dynamic-cp, published or ours")
      ->capture_default_str();
  cmd->add_option("--seed", o.sampler.seed, "seed of the sampler and the published planner")
      ->capture_default_str();
  cmd->add_option("--json", json, "write the run summary JSON here (atomically)")
      ->check(NonEmptyPath());
  cmd->add_option("--trace", trace, "write a Chrome trace (Perfetto) of --trace-steps here")
      ->check(NonEmptyPath());
  cmd->add_option("--trace-steps", trace_steps,
                  "0-based steps to trace, comma-separated (default: the first)")
      ->delimiter(',');
  cmd->add_option("--backward-to-forward", o.schedule.backward_to_forward,
                  "backward:forward time ratio of a stage")
      ->capture_default_str();
  cmd->add_option("--nvlink-gbytes-per-s", o.comm.nvlink_gbytes_per_s,
                  "NVLink bandwidth per GPU within a node, GB/s")
      ->capture_default_str();
  cmd->add_option("--network-gbits-per-node", o.comm.network_gbits_per_s_per_node,
                  "network bandwidth of one node to the others (all NICs), Gb/s")
      ->capture_default_str();
  cmd->add_option("--p2p-latency-us", o.comm.p2p_latency_us,
                  "latency of one point-to-point message between stages, us")
      ->capture_default_str();
  cmd->add_option("--collective-latency-us", o.comm.collective_latency_us,
                  "latency of one collective phase, us")
      ->capture_default_str();
  cmd->add_option("--grad-bytes-per-param", o.comm.grad_bytes_per_param,
                  "bytes per reduce-scattered gradient value (2 bf16, 4 fp32)")
      ->capture_default_str();
  cmd->add_flag("--no-overlap", no_overlap,
                "the serial model: the parameter all-gather before compute and the gradient "
                "reduce-scatter after it, nothing overlapped (default: bucket by bucket, "
                "overlapped with forward and backward)");
  cmd->add_option("--ddp-bucket-size", o.comm.bucket_elements,
                  "parameters per bucket of the overlapped collectives (as train's)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--cp-layouts", cp_layouts,
                  "where a cp > 1 pipeline may put a document: subsets (over any of its cp "
                  "ranks), whole-or-every (one rank or all) or every-rank (Megatron-LM's rule; "
                  "static-cp always uses it)")
      ->capture_default_str();
  cmd->add_flag("--sync-blind", sync_blind,
                "ours chooses strategies on compute time alone (default: compute + modelled "
                "synchronisation)");
  cmd->add_flag("--no-communication", no_communication,
                "every communication term takes 0 ms (the planner's view)");
  cmd->add_option("--optimizer-ms", o.optimizer.fixed_ms,
                  "fixed optimizer-step time, ms (default: from parameters per GPU and HBM "
                  "bandwidth)")
      ->check(NonNegativeNumber());
  cmd->add_option("--hbm-gbytes-per-s", o.optimizer.hbm_gbytes_per_s,
                  "effective HBM bandwidth per GPU for the optimizer step, GB/s")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", quiet, "do not print the table");
}

}  // namespace hydraulis::tools
