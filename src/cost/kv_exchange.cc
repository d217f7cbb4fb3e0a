#include "hydraulis/cost/kv_exchange.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

constexpr double kBytesPerGigabyte = 1e9, kBitsPerByte = 8, kMsPerSecond = 1e3;

// Forward all-gather, backward all-gather and backward reduce-scatter.
constexpr double kTransfersPerLayer = 3;

}  // namespace

double KvBytesPerTokenLayer(const ModelSpec& model, int tp, double bytes_per_value) {
  const double heads_per_rank = static_cast<double>(std::max(model.kv_heads, tp)) / tp;
  const double head_dim = HeadDim(model);
  return 2.0 * heads_per_rank * head_dim * bytes_per_value;
}

double KvExchangeMsPerToken(const ModelSpec& model, const Scheme& scheme, int gpus_per_node,
                            const KvExchangeLinks& links) {
  if (scheme.cp <= 1) return 0.0;
  const double layers = static_cast<double>(model.layers) / scheme.pp;
  const double bytes = layers * kTransfersPerLayer * (scheme.cp - 1.0) / scheme.cp *
                       KvBytesPerTokenLayer(model, scheme.tp, links.bytes_per_value);
  const bool intra_node = scheme.cp * scheme.tp <= gpus_per_node;
  const double bytes_per_s = intra_node ? links.nvlink_gbytes_per_s * kBytesPerGigabyte
                                        : links.network_gbits_per_s_per_node * kBytesPerGigabyte /
                                              kBitsPerByte / std::max(gpus_per_node, 1);
  return bytes / bytes_per_s * kMsPerSecond;
}

CpTopology CpTopologyOf(const ClusterSpec& cluster, int tp, const KvExchangeLinks& links) {
  CpTopology t;
  const int gpus_per_node = std::max(cluster.gpus_per_node, 1);
  t.ranks_per_node = std::max(gpus_per_node / std::max(tp, 1), 1);
  const double inter_bytes_per_s =
      links.network_gbits_per_s_per_node * kBytesPerGigabyte / kBitsPerByte / gpus_per_node;
  const double intra_bytes_per_s = links.nvlink_gbytes_per_s * kBytesPerGigabyte;
  t.intra_over_inter = std::min(1.0, inter_bytes_per_s / intra_bytes_per_s);
  return t;
}

void AddDerivedContextParallelSchemes(Profile& profile, std::span<const int> cp_sizes,
                                      const KvExchangeLinks& links) {
  for (int cp : cp_sizes) {
    if (cp < 2) throw InvalidInput("cp: derived schemes need cp >= 2, got " + std::to_string(cp));
  }
  if (!(links.nvlink_gbytes_per_s > 0) || !(links.network_gbits_per_s_per_node > 0) ||
      !(links.bytes_per_value > 0) || !std::isfinite(links.nvlink_gbytes_per_s) ||
      !std::isfinite(links.network_gbits_per_s_per_node)) {
    throw InvalidInput("key/value exchange: bandwidths and bytes per value must be > 0");
  }
  std::vector<SchemeProfile> bases;
  for (const SchemeProfile& sp : profile.schemes) {
    if (sp.scheme.cp == 1 && sp.scheme.pp == 1) bases.push_back(sp);
  }
  for (int cp : cp_sizes) {
    for (const SchemeProfile& base : bases) {
      SchemeProfile derived = base;
      derived.scheme.cp = cp;
      if (profile.Find(derived.scheme) != nullptr) continue;
      derived.kv_ms_per_token =
          KvExchangeMsPerToken(profile.model, derived.scheme, profile.cluster.gpus_per_node, links);
      profile.schemes.push_back(derived);
    }
  }
}

}  // namespace hydraulis
