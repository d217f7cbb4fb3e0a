#include "hydraulis/runtime/model/context_parallel_attention.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/model/all_gather_rows.h"
#include "hydraulis/runtime/model/attention.h"
#include "hydraulis/runtime/model/host_copy.h"

// Why an all-gather of K/V and not a ring (TransformerEngine's p2p, zigzag ring attention):
// it is Llama 3's choice for long-context training. It is one collective per layer that
// works for any mix of document lengths (a ring over variable-length chunks needs per-step
// bookkeeping of which chunk pairs are causal); with grouped-query attention K and V are a
// small fraction of the activations, so the gathered copy is cheap next to the O(L^2)
// attention it serves; and the attention itself stays one variable-length kernel call.
// Its cost: the gather is exposed (not overlapped with attention), and the gathered K/V of
// the sharded documents is materialised per layer.

namespace hydraulis {
namespace {

void CheckInputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const LocalTokenLayout& local, const CommGroup& group) {
  if (group.size() != local.cp || group.rank() != local.rank) {
    throw InvalidInput("context-parallel attention: the layout is rank " +
                       std::to_string(local.rank) + " of cp " + std::to_string(local.cp) +
                       " but the group '" + group.name() + "' is rank " +
                       std::to_string(group.rank()) + " of " + std::to_string(group.size()));
  }
  const std::int64_t rows = local.storage_tokens();
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3 || q.size(0) != rows || k.size(0) != rows ||
      v.size(0) != rows || !k.sizes().equals(v.sizes()) || q.size(2) != k.size(2) ||
      k.size(1) < 1 || q.size(1) % k.size(1) != 0) {
    throw InvalidInput(
        "context-parallel attention: q must be [" + std::to_string(rows) +
        ", heads, head_dim] and k, v [" + std::to_string(rows) +
        ", kv_heads, head_dim] with kv_heads dividing heads (the layout's storage rows)");
  }
}

}  // namespace

ContextParallelRows MakeContextParallelRows(const LocalTokenLayout& local, at::Device device) {
  const int cp = local.cp;
  const std::int64_t storage = local.storage_tokens();
  ContextParallelRows rows;
  rows.local = local;
  // Where each rank's share of every sharded document starts in that rank's block of the
  // gathered buffer: its chunks of the sharded documents in micro-batch order, head then
  // tail, the order of its local segments. The same on every rank: lengths and layout only.
  std::vector<std::vector<std::int64_t>> base(local.lengths.size());
  std::vector<std::int64_t> shares(static_cast<std::size_t>(cp), 0);
  for (std::size_t d = 0; d < local.lengths.size(); ++d) {
    if (local.layout.empty() || local.layout[d] != kSharded) continue;
    base[d] = shares;
    for (int r = 0; r < cp; ++r) {
      shares[static_cast<std::size_t>(r)] += RankShardTokens(local.lengths[d], cp, r);
    }
  }
  rows.rows_per_rank = *std::max_element(shares.begin(), shares.end());

  std::vector<std::int64_t> real, send, keys;
  rows.cu_seqlens_k.push_back(0);
  for (std::size_t i = 0; i < local.segments.size(); ++i) {
    const RankSegment& seg = local.segments[i];
    const std::size_t d = static_cast<std::size_t>(seg.document);
    const std::int64_t first = local.storage_offsets[i];
    for (std::int64_t p = 0; p < seg.range.Size(); ++p) real.push_back(first + p);
    if (base[d].empty()) {  // placed here whole: its own rows are its keys
      for (std::int64_t p = 0; p < seg.range.Size(); ++p) keys.push_back(first + p);
      rows.cu_seqlens_k.push_back(rows.cu_seqlens_k.back() + seg.range.Size());
      continue;
    }
    for (std::int64_t p = 0; p < seg.range.Size(); ++p) send.push_back(first + p);
    // Keys [0, end) of the document, chunk by chunk from the rank holding each.
    const std::int64_t length = local.lengths[d];
    const std::int64_t end = seg.range.end;
    for (int c = 0; c < 2 * cp; ++c) {
      const TokenRange chunk = ShardChunk(length, cp, c);
      if (chunk.begin >= end) break;
      const ChunkHolder h = HolderOfChunk(cp, c);
      const std::int64_t start = storage + h.rank * rows.rows_per_rank +
                                 base[d][static_cast<std::size_t>(h.rank)] +
                                 (h.slot == 1 ? RankChunks(length, cp, h.rank)[0].Size() : 0);
      for (std::int64_t p = chunk.begin; p < std::min(chunk.end, end); ++p) {
        keys.push_back(start + (p - chunk.begin));
      }
    }
    rows.cu_seqlens_k.push_back(rows.cu_seqlens_k.back() + end);
  }
  const auto on_device = [&](const std::vector<std::int64_t>& v) { return IndicesOn(v, device); };
  if (local.has_padding()) rows.real_rows = on_device(real);
  rows.send_rows = on_device(send);
  rows.key_rows = on_device(keys);
  if (device.is_cuda()) {
    rows.cu_seqlens_q_device = CuSeqlensOnDevice(local.cu_seqlens, device);
    rows.cu_seqlens_k_device = CuSeqlensOnDevice(rows.cu_seqlens_k, device);
  }
  return rows;
}

at::Tensor ContextParallelAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const ContextParallelRows& rows, CommGroup& cp_group) {
  const LocalTokenLayout& local = rows.local;
  CheckInputs(q, k, v, local, cp_group);
  if (rows.key_rows.device() != q.device()) {
    throw InvalidInput("context-parallel attention: the rows were made for " +
                       rows.key_rows.device().str() + " but q is on " + q.device().str());
  }
  const bool padded = rows.real_rows.defined();
  const at::Tensor q_real = padded ? q.index_select(0, rows.real_rows) : q;
  at::Tensor out;
  if (!local.has_sharded_documents()) {
    // Every document is whole on one rank: no communication at all.
    out =
        VarlenCausalAttention(q_real, padded ? k.index_select(0, rows.real_rows) : k,
                              padded ? v.index_select(0, rows.real_rows) : v, local.cu_seqlens,
                              local.cu_seqlens, rows.cu_seqlens_q_device, rows.cu_seqlens_q_device);
  } else {
    const std::int64_t kv_heads = k.size(1);
    // K and V side by side: one collective for both.
    const at::Tensor kv = at::cat({k, v}, 1);
    at::Tensor send = kv.index_select(0, rows.send_rows);
    send = at::constant_pad_nd(send, {0, 0, 0, 0, 0, rows.rows_per_rank - send.size(0)});
    const at::Tensor gathered = AllGatherRows(send, cp_group);
    // The keys are picked from [local rows; gathered rows] even on a rank whose queries read
    // no gathered row (one without a sharded chunk, or without any token): the gather then
    // stays on its output's autograd path, so its backward takes part in the reduce-scatter
    // the other ranks issue (with a zero gradient) instead of leaving them waiting.
    const at::Tensor keys = at::cat({kv, gathered}, 0).index_select(0, rows.key_rows);
    out = VarlenCausalAttention(
        q_real, keys.slice(1, 0, kv_heads), keys.slice(1, kv_heads, 2 * kv_heads), local.cu_seqlens,
        rows.cu_seqlens_k, rows.cu_seqlens_q_device, rows.cu_seqlens_k_device);
  }
  if (!padded) return out;
  return at::zeros({q.size(0), out.size(1), out.size(2)}, out.options())
      .index_copy(0, rows.real_rows, out);
}

at::Tensor ContextParallelAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const LocalTokenLayout& local, CommGroup& cp_group) {
  return ContextParallelAttention(q, k, v, MakeContextParallelRows(local, q.device()), cp_group);
}

}  // namespace hydraulis
