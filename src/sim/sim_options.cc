#include "hydraulis/sim/sim_options.h"

#include <cmath>
#include <sstream>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

std::string Format(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

void RequirePositive(double value, const char* field) {
  if (!(value > 0) || !std::isfinite(value)) {
    throw InvalidInput(std::string(field) + ": must be a finite number > 0, got " + Format(value));
  }
}

void RequireNonNegative(double value, const char* field) {
  if (!(value >= 0) || !std::isfinite(value)) {
    throw InvalidInput(std::string(field) + ": must be a finite number >= 0, got " + Format(value));
  }
}

}  // namespace

void ValidateSimOptions(const SimOptions& o) {
  if (o.steps < 1) throw InvalidInput("steps: must be >= 1, got " + std::to_string(o.steps));
  if (o.sampler.tokens_per_batch < 1) {
    throw InvalidInput("tokens_per_batch: must be >= 1, got " +
                       std::to_string(o.sampler.tokens_per_batch));
  }
  if (o.sampler.max_len < 1) {
    throw InvalidInput("max_len: must be >= 1, got " + std::to_string(o.sampler.max_len));
  }
  RequirePositive(o.schedule.backward_to_forward, "backward_to_forward");
  RequirePositive(o.comm.nvlink_gbytes_per_s, "nvlink_gbytes_per_s");
  RequirePositive(o.comm.network_gbits_per_s_per_node, "network_gbits_per_s_per_node");
  RequireNonNegative(o.comm.p2p_latency_us, "p2p_latency_us");
  RequireNonNegative(o.comm.collective_latency_us, "collective_latency_us");
  RequirePositive(o.comm.activation_bytes_per_value, "activation_bytes_per_value");
  RequirePositive(o.comm.param_bytes_per_param, "param_bytes_per_param");
  RequirePositive(o.comm.grad_bytes_per_param, "grad_bytes_per_param");
  if (o.comm.bucket_elements < 1) {
    throw InvalidInput("bucket_elements: must be >= 1, got " +
                       std::to_string(o.comm.bucket_elements));
  }
  if (std::isnan(o.optimizer.fixed_ms) || std::isinf(o.optimizer.fixed_ms)) {
    throw InvalidInput("optimizer fixed_ms: must be a finite number, got " +
                       Format(o.optimizer.fixed_ms));
  }
  RequirePositive(o.optimizer.bytes_per_param, "optimizer bytes_per_param");
  RequirePositive(o.optimizer.hbm_gbytes_per_s, "hbm_gbytes_per_s");
}

}  // namespace hydraulis
