#include "hydraulis/sim/sync_cost.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "hydraulis/spec/placement.h"
#include "units.h"

namespace hydraulis {
namespace {

using sim_units::kBitsPerByte;
using sim_units::kBytesPerGigabyte;
using sim_units::kMsPerSecond;
using sim_units::kUsPerMs;

// A fraction num/den of the model's layers or of a tensor-parallel dimension.
struct Fraction {
  std::int64_t num = 0;
  std::int64_t den = 1;
  double Value() const { return static_cast<double>(num) / static_cast<double>(den); }
  bool operator<(const Fraction& o) const { return num * o.den < o.num * den; }
  bool operator==(const Fraction& o) const { return num * o.den == o.num * den; }
};

// The cuts k/n (k = 0..n) of every degree n, sorted and unique: consecutive cuts bound the
// cells on which every block of every degree is either fully present or absent.
std::vector<Fraction> Cuts(const std::vector<int>& degrees) {
  std::vector<Fraction> cuts;
  for (int n : degrees) {
    for (int k = 0; k <= n; ++k) cuts.push_back({k, n});
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// Index of the block of `degree` equal parts containing the interval starting at `lo`.
int PartOf(const Fraction& lo, int degree) { return static_cast<int>(lo.num * degree / lo.den); }

double PhaseMs(double share, double params, double bytes_per_value, double bytes_per_s,
               double latency_us) {
  if (share <= 0) return 0.0;
  return latency_us / kUsPerMs + share * params * bytes_per_value / bytes_per_s * kMsPerSecond;
}

}  // namespace

SyncTraffic ComputeSyncTraffic(const Strategy& strategy, const OptimizerLayout& layout,
                               int cluster_gpus, int gpus_per_node) {
  const std::vector<ComputeRole> compute = ComputePlacement(strategy, cluster_gpus);
  const std::vector<ParameterBlock> owners = OptimizerPlacement(layout);
  std::vector<int> pps{layout.pp}, tps{layout.tp};
  for (const Scheme& s : strategy.pipelines) {
    pps.push_back(s.pp);
    tps.push_back(s.tp);
  }
  const std::vector<Fraction> rows = Cuts(pps), cols = Cuts(tps);
  const std::size_t num_rows = rows.size() - 1, num_cols = cols.size() - 1;
  const std::size_t num_cells = num_rows * num_cols;
  auto cells_of = [&](const ParameterBlock& b) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < num_rows; ++i) {
      if (PartOf(rows[i], b.pp) != b.stage) continue;
      for (std::size_t j = 0; j < num_cols; ++j) {
        if (PartOf(cols[j], b.tp) == b.tp_rank) out.push_back(i * num_cols + j);
      }
    }
    return out;
  };
  std::vector<double> area(num_cells);
  for (std::size_t i = 0; i < num_rows; ++i) {
    for (std::size_t j = 0; j < num_cols; ++j) {
      area[i * num_cols + j] =
          (rows[i + 1].Value() - rows[i].Value()) * (cols[j + 1].Value() - cols[j].Value());
    }
  }
  const int nodes = (cluster_gpus + gpus_per_node - 1) / gpus_per_node;
  // held[n][c]: a GPU of node n computes with cell c; owned[n][c]: share of cell c whose
  // optimizer state lives on node n.
  std::vector<std::vector<char>> held(static_cast<std::size_t>(nodes),
                                      std::vector<char>(num_cells, 0));
  std::vector<std::vector<double>> owned(static_cast<std::size_t>(nodes),
                                         std::vector<double>(num_cells, 0.0));
  SyncTraffic traffic;
  for (int g = 0; g < cluster_gpus; ++g) {
    const auto n = static_cast<std::size_t>(g / gpus_per_node);
    const ComputeRole& role = compute[static_cast<std::size_t>(g)];
    if (role.pipeline >= 0) {
      for (std::size_t c : cells_of(role.block)) held[n][c] = 1;
      if (gpus_per_node > 1) {
        traffic.intra_node_share =
            std::max(traffic.intra_node_share, 1.0 / (role.block.tp * role.block.pp));
      }
    }
    for (std::size_t c : cells_of(owners[static_cast<std::size_t>(g)])) {
      owned[n][c] += 1.0 / layout.dp;
    }
  }
  std::vector<int> holders(num_cells, 0);
  for (const auto& h : held) {
    for (std::size_t c = 0; c < num_cells; ++c) holders[c] += h[c];
  }
  // Reduce-scatter: a node sends its summed gradient of every held cell except the share it
  // owns, and receives, for every share it owns, one partial sum from each other holder.
  for (std::size_t n = 0; n < held.size(); ++n) {
    double out = 0, in = 0;
    for (std::size_t c = 0; c < num_cells; ++c) {
      const double own = std::min(owned[n][c], 1.0);
      if (held[n][c]) out += area[c] * (1.0 - own);
      in += area[c] * own * (holders[c] - held[n][c]);
    }
    traffic.inter_node_share = std::max({traffic.inter_node_share, out, in});
  }
  return traffic;
}

SyncCost ComputeSyncCost(const Profile& profile, const Strategy& strategy,
                         const OptimizerLayout& layout, int cluster_gpus, const CommOptions& comm,
                         const OptimizerStepOptions& optimizer) {
  SyncCost cost;
  const double params = ParameterCount(profile.model);
  cost.traffic = ComputeSyncTraffic(strategy, layout, cluster_gpus, profile.cluster.gpus_per_node);
  if (comm.enabled) {
    const double nvlink_bytes_per_s = comm.nvlink_gbytes_per_s * kBytesPerGigabyte;
    const double network_bytes_per_s =
        comm.network_gbits_per_s_per_node * kBytesPerGigabyte / kBitsPerByte;
    auto collective_ms = [&](double bytes_per_value) {
      return PhaseMs(cost.traffic.intra_node_share, params, bytes_per_value, nvlink_bytes_per_s,
                     comm.collective_latency_us) +
             PhaseMs(cost.traffic.inter_node_share, params, bytes_per_value, network_bytes_per_s,
                     comm.collective_latency_us);
    };
    cost.materialize_ms = collective_ms(comm.param_bytes_per_param);
    cost.reduce_scatter_ms = collective_ms(comm.grad_bytes_per_param);
    const double latency_ms = comm.collective_latency_us / kUsPerMs;
    auto transfer_ms = [&](double bytes_per_value) {
      return PhaseMs(cost.traffic.intra_node_share, params, bytes_per_value, nvlink_bytes_per_s,
                     0.0) +
             PhaseMs(cost.traffic.inter_node_share, params, bytes_per_value, network_bytes_per_s,
                     0.0);
    };
    cost.collective_latency_ms = latency_ms * ((cost.traffic.intra_node_share > 0 ? 1 : 0) +
                                               (cost.traffic.inter_node_share > 0 ? 1 : 0));
    cost.materialize_transfer_ms = transfer_ms(comm.param_bytes_per_param);
    cost.reduce_scatter_transfer_ms = transfer_ms(comm.grad_bytes_per_param);
  }
  if (optimizer.fixed_ms >= 0) {
    cost.optimizer_ms = optimizer.fixed_ms;
  } else {
    const double params_per_gpu = params / cluster_gpus;
    cost.optimizer_ms = params_per_gpu * optimizer.bytes_per_param /
                        (optimizer.hbm_gbytes_per_s * kBytesPerGigabyte) * kMsPerSecond;
  }
  return cost;
}

}  // namespace hydraulis
