#include "plan_args.h"

#include "number_flags.h"
#include "output_paths.h"

namespace hydraulis::tools {

void PlanArgs::AddTo(CLI::App* cmd) {
  inputs.AddTo(cmd);
  cmd->add_option(
      "--lengths", lengths,
      "one batch's document lengths: one integer per line or a JSON array; - for stdin");
  cmd->add_option("--dataset", dataset,
                  "length dataset to sample --steps batches from (writes JSON lines)");
  cmd->add_option("--algorithm", algorithm, "ours, static-fixed, published or kk")
      ->capture_default_str();
  cmd->add_option("--seed", seed, "seed of the sampler and the randomised baselines")
      ->capture_default_str();
  cmd->add_option("--steps", steps, "batches to sample with --dataset")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tokens-per-batch", tokens_per_batch, "token budget of a sampled batch")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--max-len", max_len,
                  "context length: sampled documents are cut to it; static-fixed bin size")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_flag("--reject-overlong", reject_overlong,
                "fail on a document longer than every capacity instead of truncating it");
  cmd->add_option("--backward-to-forward", backward_to_forward,
                  "backward:forward time ratio of the 1F1B model")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--threads", threads,
                  "threads that plan candidates (0: one per hardware thread); the plans are "
                  "the same for every count")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--prune-tolerance", prune_tolerance,
                  "skip a candidate whose lower bound is within this fraction of the best plan "
                  "found (0: plan every candidate that can beat it); a plan is then at most "
                  "this fraction slower than with 0")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  source.AddTo(cmd);
  cmd->add_option("--cp-layouts", cp_layouts,
                  "where a cp > 1 pipeline may put a document: subsets (over any of its cp "
                  "ranks), whole-or-every (one rank or all) or every-rank (Megatron-LM's rule)")
      ->capture_default_str();
  cmd->add_flag("--pretty", pretty, "indent the JSON (single-batch mode)");
  cmd->add_flag("--no-timing", no_timing,
                "leave out planning_ms so the output is byte-identical across runs");
  cmd->add_option("-o,--output", output, "output file, written atomically (default stdout)")
      ->check(NonEmptyPath());
}

}  // namespace hydraulis::tools
