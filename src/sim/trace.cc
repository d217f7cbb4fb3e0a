#include "hydraulis/sim/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "units.h"

namespace hydraulis {
namespace {

using nlohmann::json;
using sim_units::kUsPerMs;

// Whole microseconds: rounding both ends of every slice the same way keeps consecutive
// slices of a track from overlapping by a rounding error, which trace viewers reject.
std::int64_t Us(double ms) { return std::llround(ms * kUsPerMs); }

json Complete(const std::string& name, const std::string& cat, int pid, int tid, double start_ms,
              double end_ms, json args) {
  const std::int64_t ts = Us(start_ms);
  return json{{"name", name},
              {"cat", cat},
              {"ph", "X"},
              {"pid", pid},
              {"tid", tid},
              {"ts", ts},
              {"dur", Us(end_ms) - ts},
              {"args", std::move(args)}};
}

json Metadata(const std::string& what, int pid, int tid, json args) {
  json e{{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

// Pipelines, and stages per pipeline index, over the traced steps.
struct TraceShape {
  std::size_t max_pipelines = 0;
  std::vector<int> max_stages;
};

TraceShape TracedShape(const SimResult& result, std::span<const int> steps) {
  const int num_steps = static_cast<int>(result.steps.size());
  TraceShape shape;
  for (int s : steps) {
    if (s < 0 || s >= num_steps) {
      throw InvalidInput("traced step " + std::to_string(s) +
                         " is out of range (the run has steps 0.." + std::to_string(num_steps - 1) +
                         ")");
    }
    const StepResult& r = result.steps[static_cast<std::size_t>(s)];
    shape.max_pipelines = std::max(shape.max_pipelines, r.pipelines.size());
    shape.max_stages.resize(shape.max_pipelines, 0);
    for (std::size_t p = 0; p < r.pipelines.size(); ++p) {
      shape.max_stages[p] = std::max(shape.max_stages[p], r.pipelines[p].scheme.pp);
    }
  }
  return shape;
}

// Process ids: pipeline p is p + 1; steps get their own process, sorted above the
// pipelines, and so do the collectives, which with overlap run beside compute.
struct TraceProcesses {
  int steps = 0;
  int network = 0;
};

void AppendTrackNames(const TraceShape& shape, const TraceProcesses& pids, json& events) {
  events.push_back(Metadata("process_name", pids.steps, -1, {{"name", "steps"}}));
  events.push_back(Metadata("process_sort_index", pids.steps, -1, {{"sort_index", -1}}));
  events.push_back(Metadata("thread_name", pids.steps, 0, {{"name", "step"}}));
  events.push_back(Metadata("process_name", pids.network, -1, {{"name", "collectives"}}));
  events.push_back(Metadata("process_sort_index", pids.network, -1, {{"sort_index", -1}}));
  events.push_back(Metadata("thread_name", pids.network, 0, {{"name", "all-gather"}}));
  events.push_back(Metadata("thread_name", pids.network, 1, {{"name", "reduce-scatter"}}));
  for (std::size_t p = 0; p < shape.max_pipelines; ++p) {
    const int pid = static_cast<int>(p) + 1;
    events.push_back(
        Metadata("process_name", pid, -1, {{"name", "pipeline " + std::to_string(p)}}));
    events.push_back(Metadata("process_sort_index", pid, -1, {{"sort_index", pid}}));
    for (int stage = 0; stage < shape.max_stages[p]; ++stage) {
      events.push_back(
          Metadata("thread_name", pid, stage, {{"name", "stage " + std::to_string(stage)}}));
    }
  }
}

// Where a step's phases start and end on the run's clock.
struct StepPhases {
  explicit StepPhases(const StepResult& r)
      : compute_start(r.start_ms + r.materialize_ms),
        sync_start(compute_start + r.compute_ms),
        // The next step starts at start_ms + step_ms; ending the last slice exactly there
        // keeps a rounding difference from overlapping the next step's first slice.
        step_end(r.start_ms + r.step_ms),
        optimizer_start(std::min(sync_start + r.reduce_scatter_ms, step_end)) {}

  double compute_start;
  double sync_start;
  double step_end;
  double optimizer_start;
};

// The step's slice and its collectives.
void AppendStepEvents(const StepResult& r, const StepPhases& at, const TraceProcesses& pids,
                      json& events) {
  events.push_back(Complete("step " + std::to_string(r.step) + " " + r.strategy, "step", pids.steps,
                            0, r.start_ms, r.start_ms + r.step_ms,
                            {{"step", r.step},
                             {"strategy", r.strategy},
                             {"description", r.strategy_description},
                             {"tokens", r.tokens},
                             {"documents", r.documents},
                             {"step_ms", r.step_ms},
                             {"bubble_share", r.bubble_share}}));
  if (r.materialize_total_ms > 0) {
    events.push_back(Complete(
        "all-gather", "collective", pids.network, 0, r.start_ms,
        r.start_ms + r.materialize_total_ms,
        {{"step", r.step}, {"busy_ms", r.materialize_total_ms}, {"exposed_ms", r.materialize_ms}}));
  }
  if (r.reduce_scatter_total_ms > 0) {
    events.push_back(Complete("reduce-scatter", "collective", pids.network, 1,
                              r.start_ms + r.reduce_scatter_start_ms, at.optimizer_start,
                              {{"step", r.step},
                               {"busy_ms", r.reduce_scatter_total_ms},
                               {"exposed_ms", r.reduce_scatter_ms}}));
  }
}

// One pipeline's stages in a step: the synchronisation each stage waits for, then the
// forward and backward passes of its micro-batches.
void AppendPipelineEvents(const StepResult& r, std::size_t p, const StepPhases& at, json& events) {
  const PipelineStepResult& pr = r.pipelines[p];
  const int pid = static_cast<int>(p) + 1;
  const std::string scheme = SchemeName(pr.scheme);
  for (int stage = 0; stage < pr.scheme.pp; ++stage) {
    const json args{{"step", r.step}, {"scheme", scheme}};
    if (r.materialize_ms > 0) {
      events.push_back(
          Complete("materialize", "sync", pid, stage, r.start_ms, at.compute_start, args));
    }
    if (r.reduce_scatter_ms > 0) {
      events.push_back(
          Complete("reduce-scatter", "sync", pid, stage, at.sync_start, at.optimizer_start, args));
    }
    if (r.optimizer_ms > 0) {
      events.push_back(
          Complete("optimizer", "sync", pid, stage, at.optimizer_start, at.step_end, args));
    }
  }
  for (const ScheduledOp& op : pr.schedule.ops) {
    const bool fwd = op.pass == PassKind::kForward;
    const auto mb = static_cast<std::size_t>(op.micro_batch);
    events.push_back(Complete((fwd ? "F" : "B") + std::to_string(op.micro_batch),
                              fwd ? "forward" : "backward", pid, op.stage,
                              at.compute_start + op.start_ms, at.compute_start + op.end_ms,
                              {{"step", r.step},
                               {"scheme", scheme},
                               {"micro_batch", op.micro_batch},
                               {"tokens", pr.micro_batch_tokens[mb]},
                               {"documents", pr.micro_batch_documents[mb]}}));
  }
}

}  // namespace

std::string ChromeTraceJson(const SimResult& result, std::span<const int> steps) {
  const TraceShape shape = TracedShape(result, steps);
  TraceProcesses pids;
  pids.steps = static_cast<int>(shape.max_pipelines) + 1;
  pids.network = pids.steps + 1;
  json events = json::array();
  AppendTrackNames(shape, pids, events);
  for (int s : steps) {
    const StepResult& r = result.steps[static_cast<std::size_t>(s)];
    const StepPhases at(r);
    AppendStepEvents(r, at, pids, events);
    for (std::size_t p = 0; p < r.pipelines.size(); ++p) AppendPipelineEvents(r, p, at, events);
  }
  json trace{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return trace.dump() + "\n";
}

}  // namespace hydraulis
