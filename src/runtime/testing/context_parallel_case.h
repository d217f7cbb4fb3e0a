// Support for tests of context-parallel attention (header-only): one micro-batch's random
// q/k/v, the single-process reference (rotary by position in the document, then
// PackedCausalAttention, its gradients for a fixed linear loss), one cp rank's run of
// ContextParallelAttention on its local rows, and the row-by-row comparison of the ranks'
// outputs and gradients with the reference.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/attention.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/local_tokens.h"

namespace hydraulis::test_support {

struct CpCase {
  std::string name;
  int cp = 2;
  std::vector<std::int64_t> lengths;
  CpLayout layout;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 8;
  std::int64_t pad_multiple = 1;
};

inline constexpr double kCpRotaryTheta = 10000.0;

// The whole micro-batch's inputs (leaves of the reference) and the loss weights: loss =
// sum(attention output * weights), so every output element gets its own gradient.
struct CpData {
  at::Tensor q, k, v, weights;
  std::vector<std::int64_t> cu_seqlens;
  at::Tensor positions;
};

// Drawn in fp32 on the CPU (the same values for every device), then moved to `options`.
inline CpData MakeCpData(const CpCase& c, std::uint64_t seed = 5,
                         at::TensorOptions options = at::TensorOptions().dtype(at::kFloat)) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  CpData d;
  d.cu_seqlens.push_back(0);
  std::vector<std::int64_t> positions;
  for (std::int64_t len : c.lengths) {
    d.cu_seqlens.push_back(d.cu_seqlens.back() + len);
    for (std::int64_t p = 0; p < len; ++p) positions.push_back(p);
  }
  const std::int64_t t = d.cu_seqlens.back();
  d.q = at::randn({t, c.heads, c.head_dim}, gen, at::kFloat);
  d.k = at::randn({t, c.kv_heads, c.head_dim}, gen, at::kFloat);
  d.v = at::randn({t, c.kv_heads, c.head_dim}, gen, at::kFloat);
  d.weights = at::randn({t, c.heads, c.head_dim}, gen, at::kFloat);
  d.positions = at::tensor(positions, at::kLong);
  for (at::Tensor* x : {&d.q, &d.k, &d.v, &d.weights}) *x = x->to(options);
  d.positions = d.positions.to(options.device());
  return d;
}

// Attention output and the gradients of the raw (pre-rotary) q, k and v, over the rows of
// the micro-batch (the reference) or of one rank's storage (a rank); fp32 on the CPU.
struct CpResult {
  at::Tensor out, dq, dk, dv;
  at::Tensor source_rows;  // a rank's: its rows' index in the micro-batch, -1 for padding
};

inline CpResult ToCpuFloat(CpResult r) {
  for (at::Tensor* x : {&r.out, &r.dq, &r.dk, &r.dv, &r.source_rows}) {
    if (x->defined()) *x = x->cpu();
  }
  for (at::Tensor* x : {&r.out, &r.dq, &r.dk, &r.dv}) {
    if (x->defined()) *x = x->to(at::kFloat);
  }
  return r;
}

inline CpResult CpReference(const CpData& d) {
  CpResult r;
  const at::Tensor q = d.q.clone().requires_grad_(true);
  const at::Tensor k = d.k.clone().requires_grad_(true);
  const at::Tensor v = d.v.clone().requires_grad_(true);
  r.out = PackedCausalAttention(ApplyRotary(q, d.positions, kCpRotaryTheta),
                                ApplyRotary(k, d.positions, kCpRotaryTheta), v, d.cu_seqlens);
  (r.out * d.weights).sum().backward();
  r.out = r.out.detach();
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  return ToCpuFloat(r);
}

// `rows` of `t` by source row; NaN on padding rows, so that attention reading a padding row
// would poison a real output.
inline at::Tensor RowsOrNan(const at::Tensor& t, const at::Tensor& source_rows) {
  const at::Tensor picked = t.index_select(0, source_rows.clamp_min(0));
  const at::Tensor real = (source_rows >= 0).view({-1, 1, 1});
  return at::where(real, picked, at::full({}, std::nanf(""), t.options()));
}

// Rank group.rank()'s run: its local rows of the micro-batch (NaN on padding), rotary by
// the positions LocalTokensOf gives, ContextParallelAttention, the backward of its share
// of the loss.
inline CpResult CpRankRun(const CpCase& c, const CpData& d, CommGroup& group) {
  const LocalTokenLayout local =
      MakeLocalTokenLayout(c.lengths, c.layout, c.cp, group.rank(), c.pad_multiple);
  const at::Tensor ids = at::arange(d.cu_seqlens.back(), at::kLong).to(d.q.device());
  const LocalTokens tokens = LocalTokensOf(ids, local);
  CpResult r;
  r.source_rows = tokens.source_rows;
  const at::Tensor q = RowsOrNan(d.q, tokens.source_rows).requires_grad_(true);
  const at::Tensor k = RowsOrNan(d.k, tokens.source_rows).requires_grad_(true);
  const at::Tensor v = RowsOrNan(d.v, tokens.source_rows).requires_grad_(true);
  r.out =
      ContextParallelAttention(ApplyRotary(q, tokens.positions, kCpRotaryTheta),
                               ApplyRotary(k, tokens.positions, kCpRotaryTheta), v, local, group);
  // Padding rows of the output must be zero; their weight is 1 (not NaN) so that the loss
  // stays finite, and their gradient must not reach any input.
  const at::Tensor real = (tokens.source_rows >= 0).view({-1, 1, 1});
  const at::Tensor weights =
      at::where(real, d.weights.index_select(0, tokens.source_rows.clamp_min(0)),
                at::ones({}, d.weights.options()));
  (r.out * weights).sum().backward();
  r.out = r.out.detach();
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  return ToCpuFloat(r);
}

// Max |a - b| over the rows, relative to max(1, max |b|).
inline double CpError(const at::Tensor& a, const at::Tensor& b) {
  if (b.numel() == 0) return 0.0;
  const double scale = std::max(1.0, b.abs().max().item<double>());
  return (a - b).abs().max().item<double>() / scale;
}

// Expects the ranks' real rows to cover the micro-batch exactly once and to match the
// reference within `tolerance`, and padding rows to be zero in the output and in every
// gradient. Returns the largest error seen.
inline double ExpectRanksMatchReference(const std::vector<CpResult>& ranks,
                                        const CpResult& reference, double tolerance) {
  const std::int64_t total = reference.out.size(0);
  std::vector<int> seen(static_cast<std::size_t>(total), 0);
  double worst = 0.0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    SCOPED_TRACE("cp rank " + std::to_string(r));
    const CpResult& x = ranks[r];
    if (!x.out.defined() || !x.dq.defined() || !x.dk.defined() || !x.dv.defined()) {
      ADD_FAILURE() << "no output or gradient";
      continue;
    }
    const at::Tensor real = at::nonzero(x.source_rows >= 0).view({-1});
    const at::Tensor pad = at::nonzero(x.source_rows < 0).view({-1});
    const at::Tensor rows = x.source_rows.index_select(0, real);
    for (std::int64_t i = 0; i < rows.size(0); ++i)
      ++seen[static_cast<std::size_t>(rows[i].item<std::int64_t>())];
    const std::pair<const at::Tensor*, const at::Tensor*> pairs[] = {{&x.out, &reference.out},
                                                                     {&x.dq, &reference.dq},
                                                                     {&x.dk, &reference.dk},
                                                                     {&x.dv, &reference.dv}};
    const char* names[] = {"output", "dq", "dk", "dv"};
    for (std::size_t i = 0; i < 4; ++i) {
      const at::Tensor mine = pairs[i].first->index_select(0, real);
      const at::Tensor want = pairs[i].second->index_select(0, rows);
      EXPECT_TRUE(at::isfinite(mine).all().item<bool>()) << names[i];
      const double error = CpError(mine, want);
      EXPECT_LE(error, tolerance) << names[i];
      worst = std::max(worst, error);
      if (pad.numel() > 0) {
        EXPECT_TRUE(at::equal(pairs[i].first->index_select(0, pad),
                              at::zeros_like(pairs[i].first->index_select(0, pad))))
            << names[i] << " on padding rows";
      }
    }
  }
  for (std::int64_t i = 0; i < total; ++i) {
    EXPECT_EQ(seen[static_cast<std::size_t>(i)], 1) << "micro-batch row " << i;
  }
  return worst;
}

}  // namespace hydraulis::test_support
