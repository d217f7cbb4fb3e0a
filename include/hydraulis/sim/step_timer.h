// Times one planned step: materialisation, every pipeline's 1F1B schedule with
// point-to-point sends, the gradient reduce-scatter (both collectives overlapped with
// compute or not, CommOptions::overlap) and the optimizer step.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hydraulis/assign/plan.h"
#include "hydraulis/assign/problem.h"
#include "hydraulis/sim/comm_overlap.h"
#include "hydraulis/sim/pipeline_schedule.h"
#include "hydraulis/sim/sim_options.h"
#include "hydraulis/sim/sync_cost.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

struct PipelineStepResult {
  Scheme scheme;
  int micro_batches = 0;
  std::int64_t tokens = 0;
  std::vector<std::int64_t> micro_batch_tokens;  // real tokens, execution order
  std::vector<int> micro_batch_documents;        // documents, execution order
  double planned_ms = 0;   // the plan's estimate: exact 1F1B without communication
  double pipeline_ms = 0;  // simulated 1F1B makespan including point-to-point sends
  double busy_ms = 0;      // compute time of one stage (all stages do the same work)
  // Share of this pipeline's GPU time idle during the step's compute phase:
  // 1 - busy_ms / compute_ms.
  double bubble_share = 0;
  PipelineSchedule schedule;  // times relative to the start of the compute phase
};

struct StepResult {
  int step = 0;                      // 0-based
  double start_ms = 0;               // simulated time the step starts (earlier steps end to end)
  int strategy_index = 0;            // position in the candidate set
  std::string strategy;              // its name, e.g. "S3"
  std::string strategy_description;  // e.g. "TP16 + 12 x TP4"
  int documents = 0;
  std::int64_t tokens = 0;  // real tokens trained (after the long-document rule)
  int truncated_documents = 0;
  std::int64_t truncated_tokens = 0;
  double planned_ms = 0;  // the system's estimate (slowest pipeline, no communication)
  // The four phases, one after another; the collectives' time that overlaps compute is in
  // none of them (CommOptions::overlap). Without overlap phases 1 and 3 are the whole
  // collectives.
  double materialize_ms = 0;     // phase 1: all-gather time compute waits for
  double compute_ms = 0;         // phase 2: slowest pipeline_ms
  double reduce_scatter_ms = 0;  // phase 3: reduce-scatter time after compute
  double optimizer_ms = 0;       // phase 4
  double step_ms = 0;            // sum of the four phases
  // The collectives' own time, hidden or not, and when they run (ms from the step's start):
  // the all-gathers from 0 to materialize_total_ms, the reduce-scatters from
  // reduce_scatter_start_ms to the end of phase 3, busy for reduce_scatter_total_ms of it.
  double materialize_total_ms = 0;
  double reduce_scatter_start_ms = 0;
  double reduce_scatter_total_ms = 0;
  double tokens_per_second = 0;
  // Share of the busy GPUs' time during the compute phase not spent computing (pipeline
  // bubbles and waiting for the slowest pipeline), weighted by GPUs.
  double bubble_share = 0;
  std::vector<PipelineStepResult> pipelines;
};

// Sets `r`'s collective fields (phases 1, 3 and 4 and the totals) from its candidate's
// `sync`: without `overlap` each collective is a phase of its own; with it, OverlapSync of
// `windows` (one per pipeline; `synchronised` as there) on the buckets `bucket_bounds`
// (BucketBounds). Precondition: r.compute_ms is set.
void SetSyncPhases(StepResult& r, const SyncCost& sync, bool overlap,
                   std::span<const PipelineWindows> windows, std::span<const double> bucket_bounds,
                   bool synchronised = false);

// Completes `r` from its phases and its pipelines' busy_ms: each pipeline's bubble_share,
// the step's GPU-weighted bubble_share, step_ms (the four phases) and tokens_per_second.
void CompleteStepResult(StepResult& r);

class StepTimer {
 public:
  // Precompute the synchronisation cost of every candidate. Precondition: `candidates`
  // was validated against `profile`; options validated (ValidateSimOptions). InvalidInput
  // when the bucket size cuts the model into too many buckets (BucketBounds).
  StepTimer(const Profile& profile, const CandidateSet& candidates, const SimOptions& options);

  // Times `plan` (its strategy_index names a candidate of the set, its micro-batches
  // index its lengths). padded_tokens > 0: every micro-batch is computed and sent as that
  // many tokens (the padding system; StepPlanner::padded_tokens), else as its documents,
  // its activations padded to the variable-length alignment. step and start_ms of the
  // result are left 0.
  StepResult Time(const Plan& plan, std::int64_t padded_tokens = 0) const;

  // Simulated time (ms) of sending `tokens` activations over stage boundary `boundary`
  // of pipeline `pipeline` of candidate `strategy_index` (latency included).
  double SendMs(int strategy_index, int pipeline, int boundary, std::int64_t tokens) const;

  const SyncCost& Sync(int strategy_index) const;
  const std::vector<double>& BucketBoundaries() const { return bucket_bounds_; }

 private:
  Profile profile_;
  CandidateSet candidates_;
  SimOptions options_;
  std::vector<SyncCost> sync_;                      // per candidate
  std::vector<std::vector<PipelineModel>> models_;  // per candidate, per pipeline
  std::vector<std::vector<int>> first_gpus_;        // per candidate, per pipeline
  std::vector<double> bucket_bounds_;               // BucketBounds of the model
};

}  // namespace hydraulis
