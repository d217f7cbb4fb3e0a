// Our two-stage data assignment for one batch on one strategy: stage 1 dispatches
// documents to pipelines using an estimate of what stage 2 will make of each pipeline,
// stage 2 packs each pipeline (pack.h), and a local search moves and swaps documents out
// of the slowest pipeline judged by the exact 1F1B time. Deterministic; no time limits.
#pragma once

#include <atomic>
#include <optional>

#include "hydraulis/assign/pack.h"
#include "hydraulis/assign/problem.h"
#include "hydraulis/base/idle_threads.h"

namespace hydraulis {

struct TwoStageOptions {
  PackOptions pack;
  // Most improving moves/swaps between pipelines (>= 0).
  int max_local_search_steps = 400;
  // Candidate moves verified by a real re-pack per local-search step (>= 1).
  int moves_verified_per_step = 16;
  // Stage 1 offers a document every member of a group of at most this many identical
  // pipelines, and only the least-loaded member of a larger group (>= 1): the plain scan
  // costs O(pipelines) per document, which strategies of thousands of pipelines cannot pay.
  int scanned_group_members = 64;
  // When the local search stops above stop_below_ms with a cp pipeline the slowest: rounds
  // of re-dispatching with each cp pipeline's estimate scaled by its packed time over its
  // estimate, then a second local search; the faster result is kept (>= 0; 0: none).
  // docs/design.md, "Stage 1".
  int cp_calibration_rounds = 3;
  // ... only on strategies of at most this many pipelines: at 16,384 GPUs (1,800 and more)
  // it doubled the slowest steps' planning time and changed no plan (docs/benchmarks.md).
  int cp_calibration_max_pipelines = 512;
  // Stop early once the step time is within this relative distance of `stop_below_ms`.
  double stop_below_ms = 0;
  // Threads for one problem (>= 1): with cp pipelines its two assignments (the plain and
  // the exchange-charged estimate) run at once on two; the result is the same on any.
  int threads = 1;
  // When given and set, the search stops at its next step and returns what it has: for a
  // caller that searched ahead and no longer needs the result (which it then discards).
  const std::atomic<bool>* stop = nullptr;
  // Threads the search may borrow while idle, to evaluate two moves at once (the planner's
  // pool lends its idle workers); the result is the same with or without.
  IdleThreads* helpers = nullptr;
};

// Estimated time of a pipeline holding documents of total `tokens`, summed document cost
// `work_ms`, largest document cost `max_work_ms` and `docs` documents, assuming stage 2
// packs into the fewest micro-batches the tokens need (pp == 1) or the best balanced
// count (pp > 1). Exact for pp == 1 whenever packing reaches ceil(tokens / capacity).
double EstimatePipelineMs(const PipelineModel& pipeline, std::int64_t tokens, double work_ms,
                          double max_work_ms, int docs);

// Solves `problem`. Precondition: every document fits some pipeline.
Assignment AssignTwoStage(const AssignProblem& problem, const TwoStageOptions& options = {});

// AssignTwoStage in its parts, for callers that schedule them on their own threads:
// with cp pipelines it runs two searches, the plain one (`charge_exchange` false) and one
// whose stage-1 estimate charges the exchange of documents that must be sharded, and keeps
// the one KeptSearch keeps. `options.threads` is not used by one search.
bool HasExchangeSearch(const AssignProblem& problem);
Assignment AssignTwoStageSearch(const AssignProblem& problem, const TwoStageOptions& options,
                                bool charge_exchange);
// Whether the plain search's result makes the exchange-charged one pointless: it reached
// `options.stop_below_ms`, which no plan can beat.
bool PlainSearchIsFinal(const Assignment& plain, const TwoStageOptions& options);
// What AssignTwoStage keeps of its two searches: the plain result where it is final or
// ran alone (`charged` empty), else the faster of the two (the plain one on ties).
Assignment KeptSearch(Assignment plain, std::optional<Assignment> charged,
                      const TwoStageOptions& options);

}  // namespace hydraulis
