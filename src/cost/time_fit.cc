#include "hydraulis/cost/time_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/cp_layout.h"

namespace hydraulis {
namespace {

constexpr std::size_t kUnknowns = 3;  // a, b, c
using Vector = std::array<double, kUnknowns>;
using Matrix = std::array<Vector, kUnknowns>;

// Below this squared residual norm (relative to the column's own unit norm) a column is
// treated as a combination of the others: the samples do not tell its coefficient apart.
constexpr double kPivotTolerance = 1e-12;

// The design row of one micro-batch: (sum s^2, sum s, 1).
Vector Features(const TimeSample& sample) {
  Vector f = {0, 0, 1};
  for (const std::int64_t length : sample.lengths) {
    const double s = static_cast<double>(length);
    f[0] += s * s;
    f[1] += s;
  }
  return f;
}

void ValidateSample(const TimeSample& sample, std::size_t index) {
  const std::string where = "time samples[" + std::to_string(index) + "]";
  if (sample.lengths.empty()) throw InvalidInput(where + ".lengths: no document");
  for (std::size_t d = 0; d < sample.lengths.size(); ++d) {
    if (sample.lengths[d] < 1) {
      throw InvalidInput(where + ".lengths[" + std::to_string(d) + "]: must be >= 1, got " +
                         std::to_string(sample.lengths[d]));
    }
  }
  if (!std::isfinite(sample.ms) || sample.ms <= 0) {
    throw InvalidInput(where + ".ms: must be finite and > 0, got " + std::to_string(sample.ms));
  }
}

// Solves gram[S][S] x_S = rhs[S] for the variables in `mask` by Cholesky; the others are 0.
// Returns false when the restricted Gram matrix is (numerically) singular.
bool SolveSubset(const Matrix& gram, const Vector& rhs, unsigned mask, Vector& x) {
  std::array<std::size_t, kUnknowns> vars{};
  std::size_t n = 0;
  for (std::size_t k = 0; k < kUnknowns; ++k) {
    if ((mask >> k) & 1U) vars[n++] = k;
  }
  Matrix l{};
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      double sum = gram[vars[i]][vars[j]];
      for (std::size_t k = 0; k < j; ++k) sum -= l[i][k] * l[j][k];
      if (i == j) {
        if (sum <= kPivotTolerance) return false;
        l[i][i] = std::sqrt(sum);
      } else {
        l[i][j] = sum / l[j][j];
      }
    }
  }
  Vector y{};  // L y = rhs_S
  for (std::size_t i = 0; i < n; ++i) {
    double sum = rhs[vars[i]];
    for (std::size_t k = 0; k < i; ++k) sum -= l[i][k] * y[k];
    y[i] = sum / l[i][i];
  }
  Vector z{};  // L^T z = y
  for (std::size_t i = n; i-- > 0;) {
    double sum = y[i];
    for (std::size_t k = i + 1; k < n; ++k) sum -= l[k][i] * z[k];
    z[i] = sum / l[i][i];
  }
  x = {0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) x[vars[i]] = z[i];
  return true;
}

}  // namespace

namespace {

// How well `predict` explains the samples: the count, R^2 of the unweighted residuals, and
// the largest and root-mean-square relative errors.
void RecordFitQuality(std::span<const TimeSample> samples,
                      const std::function<double(const TimeSample&)>& predict, TimeFit& fit) {
  fit.samples = static_cast<int>(samples.size());
  double mean = 0;
  for (const TimeSample& s : samples) mean += s.ms;
  mean /= static_cast<double>(samples.size());
  double ss_res = 0, ss_tot = 0, sum_rel2 = 0;
  for (const TimeSample& s : samples) {
    const double r = predict(s) - s.ms;
    ss_res += r * r;
    ss_tot += (s.ms - mean) * (s.ms - mean);
    const double rel = std::abs(r) / s.ms;
    sum_rel2 += rel * rel;
    fit.max_relative_error = std::max(fit.max_relative_error, rel);
  }
  fit.r_squared = ss_tot > 0 ? 1.0 - ss_res / ss_tot : (ss_res == 0 ? 1.0 : 0.0);
  fit.rms_relative_error = std::sqrt(sum_rel2 / static_cast<double>(samples.size()));
}

}  // namespace

TimeFit FitTimeModel(std::span<const TimeSample> samples, const TimeFitOptions& options) {
  if (samples.size() < kUnknowns) {
    throw InvalidInput("time samples: need at least 3 micro-batches to fit a, b and c, got " +
                       std::to_string(samples.size()));
  }
  std::vector<Vector> rows;
  std::vector<double> weights;
  rows.reserve(samples.size());
  weights.reserve(samples.size());
  for (std::size_t j = 0; j < samples.size(); ++j) {
    ValidateSample(samples[j], j);
    rows.push_back(Features(samples[j]));
    const double w = options.weighting == TimeFitWeighting::kRelative
                         ? 1.0 / (samples[j].ms * samples[j].ms)
                         : 1.0;
    weights.push_back(w);
  }

  // Columns scaled to unit weighted norm, so s^2 (up to ~1e9) and 1 meet on equal terms in
  // the normal equations and the pivot tolerance means the same for every column.
  Vector scale{};
  for (std::size_t j = 0; j < rows.size(); ++j) {
    for (std::size_t k = 0; k < kUnknowns; ++k) scale[k] += weights[j] * rows[j][k] * rows[j][k];
  }
  for (double& s : scale) s = std::sqrt(s);
  Matrix gram{};
  Vector rhs{};
  for (std::size_t j = 0; j < rows.size(); ++j) {
    for (std::size_t k = 0; k < kUnknowns; ++k) {
      const double fk = rows[j][k] / scale[k];
      rhs[k] += weights[j] * fk * samples[j].ms;
      for (std::size_t m = 0; m < kUnknowns; ++m) {
        gram[k][m] += weights[j] * fk * rows[j][m] / scale[m];
      }
    }
  }
  Vector unconstrained{};
  if (!SolveSubset(gram, rhs, 0b111U, unconstrained)) {
    throw InvalidInput(
        "time samples: they do not determine a, b and c (micro-batches must differ in their "
        "sum of squared lengths and in their token counts independently, e.g. single documents "
        "of at least three lengths)");
  }

  auto weighted_ssr = [&](const Vector& x) {
    double ssr = 0;
    for (std::size_t j = 0; j < rows.size(); ++j) {
      double predicted = 0;
      for (std::size_t k = 0; k < kUnknowns; ++k) predicted += rows[j][k] / scale[k] * x[k];
      const double r = predicted - samples[j].ms;
      ssr += weights[j] * r * r;
    }
    return ssr;
  };
  Vector best{};
  double best_ssr = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < (1U << kUnknowns); ++mask) {
    Vector x{};
    if (!SolveSubset(gram, rhs, mask, x)) continue;
    if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
    const double ssr = weighted_ssr(x);
    if (ssr < best_ssr) {
      best_ssr = ssr;
      best = x;
    }
  }

  TimeFit fit;
  fit.model = {best[0] / scale[0], best[1] / scale[1], best[2] / scale[2]};
  RecordFitQuality(
      samples, [&](const TimeSample& s) { return fit.model.MicroBatchMs(s.lengths); }, fit);
  return fit;
}

double ShardedMicroBatchMs(const TimeModel& placed, int cp, double kv_ms_per_token,
                           std::span<const std::int64_t> lengths) {
  const ShardCost cost = MakeShardCost(cp, placed, 0, kv_ms_per_token);
  double ms = placed.c_ms;
  for (const std::int64_t length : lengths) ms += cost.ShardedDocumentMs(length);
  return ms;
}

ShardedTimeFit FitShardedTimeModel(std::span<const TimeSample> samples, const TimeModel& placed,
                                   int cp, const TimeFitOptions& options) {
  if (cp < 2) throw InvalidInput("sharded time fit: cp must be >= 2, got " + std::to_string(cp));
  if (samples.empty()) throw InvalidInput("sharded time samples: need at least one micro-batch");
  for (std::size_t j = 0; j < samples.size(); ++j) ValidateSample(samples[j], j);
  // One unknown: minimise sum w_j (r_j - kv t_j)^2 with r_j the time the placed fit leaves
  // unexplained and t_j the tokens, so kv = sum w r t / sum w t^2, clamped at 0 (a
  // negative exchange time would only absorb the placed fit's error).
  double num = 0, den = 0;
  for (const TimeSample& sample : samples) {
    const double w =
        options.weighting == TimeFitWeighting::kRelative ? 1.0 / (sample.ms * sample.ms) : 1.0;
    double tokens = 0;
    for (const std::int64_t length : sample.lengths) tokens += static_cast<double>(length);
    const double r = sample.ms - ShardedMicroBatchMs(placed, cp, 0, sample.lengths);
    num += w * r * tokens;
    den += w * tokens * tokens;
  }
  ShardedTimeFit out;
  out.kv_ms_per_token = std::max(0.0, num / den);
  TimeFit& fit = out.fit;
  fit.model = placed;
  RecordFitQuality(
      samples,
      [&](const TimeSample& s) {
        return ShardedMicroBatchMs(placed, cp, out.kv_ms_per_token, s.lengths);
      },
      fit);
  return out;
}

}  // namespace hydraulis
