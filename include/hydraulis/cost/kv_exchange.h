// The key/value exchange of context parallelism and the cp schemes derived from a
// profile's tp schemes with it (docs/design.md, "Context parallelism").
#pragma once

#include <span>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/spec/profile.h"

namespace hydraulis {

// Link bandwidths the exchange runs over; the defaults are the simulator's (A800 nodes).
struct KvExchangeLinks {
  // NVLink bandwidth from one GPU to another GPU of its node, GB/s (> 0).
  double nvlink_gbytes_per_s = 400.0;
  // Network bandwidth of one node to other nodes, Gb/s (> 0), shared by its GPUs.
  double network_gbits_per_s_per_node = 800.0;
  // Bytes per key or value element (bf16: 2).
  double bytes_per_value = 2.0;
};

// Keys and values of one token in one layer on one rank of a tp group, in bytes: two
// tensors of max(kv_heads, tp) / tp heads (heads are replicated when tp exceeds kv_heads)
// of hidden / heads values.
double KvBytesPerTokenLayer(const ModelSpec& model, int tp, double bytes_per_value);

// One cp rank's exposed exchange time per token of a sharded document on one stage of
// `scheme`, ms: per layer the forward all-gather of keys and values, and in backward their
// all-gather again (the gathered copy is not kept) and the reduce-scatter of their
// gradients, each moving (cp - 1) / cp of the document's keys and values through every rank,
// over NVLink when the stage's cp * tp GPUs share a node and over the GPU's share of the
// node's network otherwise. 0 for cp = 1.
double KvExchangeMsPerToken(const ModelSpec& model, const Scheme& scheme, int gpus_per_node,
                            const KvExchangeLinks& links);

// Where the cp ranks of a stage of tp-wide ranks sit on `cluster`: gpus_per_node / tp of
// them share a node (at least 1), and the exchange inside a node runs at NVLink speed
// against the GPU's share of the node's network across nodes (`links`' ratio).
CpTopology CpTopologyOf(const ClusterSpec& cluster, int tp, const KvExchangeLinks& links = {});

// Adds to `profile` a <cp, tp, 1> scheme for every cp in `cp_sizes` (each >= 2) and every
// profiled <1, tp, 1> scheme: the same a, b and c (a document placed whole on one cp rank
// runs as on its tp group), and kv_ms_per_token from KvExchangeMsPerToken. Schemes already
// profiled are kept as they are. InvalidInput on a cp below 2 or a link bandwidth <= 0.
void AddDerivedContextParallelSchemes(Profile& profile, std::span<const int> cp_sizes,
                                      const KvExchangeLinks& links = {});

}  // namespace hydraulis
