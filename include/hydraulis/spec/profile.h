// A fitted cost and memory profile: what the planner knows about a model on a cluster.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "hydraulis/spec/cluster.h"
#include "hydraulis/spec/model.h"
#include "hydraulis/spec/recompute.h"
#include "hydraulis/spec/scheme.h"

namespace hydraulis {

// Fitted time of one pipeline stage (layers/pp layers), forward + backward, for one
// micro-batch: sum over its documents of (a * s^2 + b * s) + c, in milliseconds. For a
// context-parallel scheme (cp > 1) a and b are the time of a document placed whole on one cp
// rank, and a document sharded over the cp ranks costs every rank
// (a s^2 + b s) / cp + kv_ms_per_token * s (cost/cp_layout.h; docs/design.md).
struct SchemeProfile {
  Scheme scheme;
  double a_ms_per_token2 = 0;  // >= 0
  double b_ms_per_token = 0;   // >= 0
  double c_ms = 0;             // >= 0, fixed cost per micro-batch
  // cp > 1: one rank's exposed key/value exchange per token of a sharded document (the
  // forward all-gather and the backward reduce-scatter of its keys and values), >= 0; 0
  // when cp = 1.
  double kv_ms_per_token = 0;
};

// The memory regression of method.md 2.1 (all byte figures per GPU).
struct MemoryModel {
  // Activation bytes per token per hidden unit per layer, by tensor-parallel degree.
  std::map<int, double> activation_bytes_by_tp;
  // Model-state bytes per H^2 per layer (weights, gradients, optimizer states).
  double state_bytes_per_h2_layer = 0;
  // Share of the model state that is optimizer state (sharded by the optimizer layout).
  double optimizer_share = 0;
  // CUDA/NCCL context bytes.
  double context_bytes = 0;
  // Bytes kept free as a safety margin.
  double reserved_bytes = 0;
};

// Model, per-node cluster facts (gpus is 0 here: the candidate set gives the size), the
// memory model and one fitted entry per profiled scheme.
struct Profile {
  ModelSpec model;
  ClusterSpec cluster;
  MemoryModel memory;
  std::vector<SchemeProfile> schemes;
  // The activation recomputation the activation bytes and the times are for (measured or
  // derived under it): a run trains with this mode, or plans on the wrong capacities.
  Recompute recompute = Recompute::kNone;
  // Smallest packed micro-batch (tokens) that keeps a GPU busy, by tp; informational.
  std::map<int, int> utilization_tokens_by_tp;

  // The fitted entry for `scheme`, or nullptr when it was not profiled.
  const SchemeProfile* Find(const Scheme& scheme) const;
};

}  // namespace hydraulis
