// The fitted time model of one scheme (method.md 2.1): a document of s tokens costs
// a*s^2 + b*s per pipeline stage (the quadratic term is per document because packed
// attention is block-diagonal); a micro-batch costs the sum plus c.
#pragma once

#include <cstdint>
#include <span>

#include "hydraulis/spec/profile.h"

namespace hydraulis {

struct TimeModel {
  double a_ms_per_token2 = 0;
  double b_ms_per_token = 0;
  double c_ms = 0;

  static TimeModel From(const SchemeProfile& p) {
    return {p.a_ms_per_token2, p.b_ms_per_token, p.c_ms};
  }
  // One stage's forward+backward time of one document, without the per-micro-batch c.
  double DocumentMs(std::int64_t tokens) const {
    const double s = static_cast<double>(tokens);
    return a_ms_per_token2 * s * s + b_ms_per_token * s;
  }
  // One stage's time of a micro-batch holding documents of these lengths.
  double MicroBatchMs(std::span<const std::int64_t> lengths) const;
};

}  // namespace hydraulis
