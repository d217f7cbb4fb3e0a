#include "hydraulis/runtime/model/context_parallel_attention.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/model/attention.h"
#include "hydraulis/runtime/model/host_copy.h"

// Why exchanging whole chunks of K/V and not a ring (TransformerEngine's p2p, zigzag ring
// attention): it is Llama 3's all-gather choice, narrowed to each document's own ranks. It
// works for any mix of document lengths and rank sets (a ring over variable-length chunks
// needs per-step bookkeeping of which chunk pairs are causal); with grouped-query attention
// K and V are a small fraction of the activations, so the received copy is cheap next to
// the O(L^2) attention it serves; and the attention itself stays one variable-length kernel
// call. Point to point on the stage's one cp communicator rather than a collective over a
// group per rank set: documents of one micro-batch use different sets, and a communicator
// per set would be created per micro-batch (or 2^cp of them up front). Its cost: the
// exchange is exposed (not overlapped with attention), and backward exchanges again
// (ExchangedAttentionFunction below) so that no layer keeps another rank's K/V.

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

namespace {

// Per shared document, where each other rank's chunks start in the block that rank sends
// (by position among the document's ranks); the same sums on every rank. Adds what each
// rank sends here to `receive_counts`.
std::vector<std::vector<std::int64_t>> SharedDocumentBases(
    const LocalTokenLayout& local, std::vector<std::int64_t>& receive_counts) {
  const std::size_t n = local.lengths.size();
  std::vector<std::vector<std::int64_t>> base(n);
  for (std::size_t d = 0; d < n; ++d) {
    if (local.layout.empty() || local.layout.Width(d) < 2) continue;
    const std::span<const int> ranks = local.layout.Ranks(d);
    if (std::find(ranks.begin(), ranks.end(), local.rank) == ranks.end()) continue;
    const int k = static_cast<int>(ranks.size());
    base[d].assign(ranks.size(), 0);
    for (int j = 0; j < k; ++j) {
      const auto q = static_cast<std::size_t>(ranks[static_cast<std::size_t>(j)]);
      if (ranks[static_cast<std::size_t>(j)] == local.rank) continue;
      base[d][static_cast<std::size_t>(j)] = receive_counts[q];
      receive_counts[q] += RankShardTokens(local.lengths[d], k, j);
    }
  }
  return base;
}

// This rank's own segments of each shared document: the storage row of its head (slot 0)
// and tail (slot 1) chunk, -1 where the chunk is empty; and the rows it sends, by receiver
// in rank order.
struct OwnRows {
  std::vector<std::array<std::int64_t, 2>> own;
  std::vector<std::int64_t> send;
};

OwnRows OwnAndSentRows(const LocalTokenLayout& local,
                       const std::vector<std::vector<std::int64_t>>& base,
                       std::vector<std::int64_t>& send_counts) {
  const auto ranks_count = static_cast<std::size_t>(local.cp);
  OwnRows out;
  out.own.assign(local.lengths.size(), {-1, -1});
  std::vector<std::vector<std::int64_t>> send_to(ranks_count);
  for (std::size_t i = 0; i < local.segments.size(); ++i) {
    const RankSegment& seg = local.segments[i];
    const auto d = static_cast<std::size_t>(seg.document);
    if (base[d].empty()) continue;
    const std::span<const int> ranks = local.layout.Ranks(d);
    const int k = static_cast<int>(ranks.size());
    const int me =
        static_cast<int>(std::find(ranks.begin(), ranks.end(), local.rank) - ranks.begin());
    const TokenRange head = RankChunks(local.lengths[d], k, me)[0];
    const int slot = seg.range.begin == head.begin && head.Size() > 0 ? 0 : 1;
    out.own[d][static_cast<std::size_t>(slot)] = local.storage_offsets[i];
    for (int q : ranks) {
      if (q == local.rank) continue;
      for (std::int64_t p = 0; p < seg.range.Size(); ++p) {
        send_to[static_cast<std::size_t>(q)].push_back(local.storage_offsets[i] + p);
      }
    }
  }
  for (std::size_t q = 0; q < ranks_count; ++q) {
    send_counts[q] = static_cast<std::int64_t>(send_to[q].size());
    out.send.insert(out.send.end(), send_to[q].begin(), send_to[q].end());
  }
  return out;
}

// Keys [0, end) of shared document d, chunk by chunk: this rank's own from its storage,
// the others' from the block their rank sent.
void AppendSharedKeys(const LocalTokenLayout& local, std::size_t d, std::int64_t end,
                      const std::array<std::int64_t, 2>& own, const std::vector<std::int64_t>& base,
                      const std::vector<std::int64_t>& receive_offset,
                      std::vector<std::int64_t>& keys) {
  const std::span<const int> ranks = local.layout.Ranks(d);
  const int k = static_cast<int>(ranks.size());
  const std::int64_t length = local.lengths[d];
  for (int c = 0; c < 2 * k; ++c) {
    const TokenRange chunk = ShardChunk(length, k, c);
    if (chunk.begin >= end) break;
    const ChunkHolder h = HolderOfChunk(k, c);
    const auto position = static_cast<std::size_t>(h.rank);
    const int holder = ranks[position];
    const std::int64_t start =
        holder == local.rank ? own[static_cast<std::size_t>(h.slot)]
                             : receive_offset[static_cast<std::size_t>(holder)] + base[position] +
                                   (h.slot == 1 ? RankChunks(length, k, h.rank)[0].Size() : 0);
    for (std::int64_t p = chunk.begin; p < std::min(chunk.end, end); ++p) {
      keys.push_back(start + (p - chunk.begin));
    }
  }
}

}  // namespace

ContextParallelRows MakeContextParallelRows(const LocalTokenLayout& local, at::Device device) {
  const auto ranks_count = static_cast<std::size_t>(local.cp);
  const std::int64_t storage = local.storage_tokens();
  ContextParallelRows rows;
  rows.local = local;
  rows.send_counts.assign(ranks_count, 0);
  rows.receive_counts.assign(ranks_count, 0);
  const std::vector<std::vector<std::int64_t>> base =
      SharedDocumentBases(local, rows.receive_counts);
  std::vector<std::int64_t> receive_offset(ranks_count, storage);
  for (std::size_t q = 1; q < ranks_count; ++q) {
    receive_offset[q] = receive_offset[q - 1] + rows.receive_counts[q - 1];
  }
  const OwnRows own = OwnAndSentRows(local, base, rows.send_counts);

  std::vector<std::int64_t> real, keys;
  rows.cu_seqlens_k.push_back(0);
  for (std::size_t i = 0; i < local.segments.size(); ++i) {
    const RankSegment& seg = local.segments[i];
    const auto d = static_cast<std::size_t>(seg.document);
    const std::int64_t first = local.storage_offsets[i];
    for (std::int64_t p = 0; p < seg.range.Size(); ++p) real.push_back(first + p);
    if (base[d].empty()) {  // placed here whole: its own rows are its keys
      for (std::int64_t p = 0; p < seg.range.Size(); ++p) keys.push_back(first + p);
      rows.cu_seqlens_k.push_back(rows.cu_seqlens_k.back() + seg.range.Size());
      continue;
    }
    AppendSharedKeys(local, d, seg.range.end, own.own[d], base[d], receive_offset, keys);
    rows.cu_seqlens_k.push_back(rows.cu_seqlens_k.back() + seg.range.end);
  }
  const auto on_device = [&](const std::vector<std::int64_t>& v) { return IndicesOn(v, device); };
  if (local.has_padding()) rows.real_rows = on_device(real);
  rows.send_rows = on_device(own.send);
  rows.key_rows = on_device(keys);
  if (device.is_cuda()) {
    rows.cu_seqlens_q_device = CuSeqlensOnDevice(local.cu_seqlens, device);
    rows.cu_seqlens_k_device = CuSeqlensOnDevice(rows.cu_seqlens_k, device);
  }
  return rows;
}

namespace {

// Sends each other rank q the rows of `outgoing` meant for it (send_counts[q] of them, by
// receiver in rank order) and receives receive_counts[q] rows from each; returns the
// received rows by sender in rank order. The lower rank of a pair sends first (NCCL runs a
// pair's operations in the order both issued them; Gloo matches them by tag). Zero-row
// messages are not sent; both sides know every count from the layout.
at::Tensor ExchangeRows(const at::Tensor& outgoing, const std::vector<std::int64_t>& send_counts,
                        const std::vector<std::int64_t>& receive_counts, CommGroup& group,
                        int tag) {
  std::int64_t received_rows = 0;
  for (std::int64_t c : receive_counts) received_rows += c;
  std::vector<std::int64_t> sizes = outgoing.sizes().vec();
  sizes[0] = received_rows;
  at::Tensor received = at::empty(sizes, outgoing.options());
  std::vector<std::unique_ptr<CommWork>> pending;
  std::int64_t sent = 0, got = 0;
  const int me = group.rank();
  for (int q = 0; q < group.size(); ++q) {
    const auto u = static_cast<std::size_t>(q);
    if (q == me) continue;
    const auto send = [&] {
      if (send_counts[u] > 0) group.Send(outgoing.narrow(0, sent, send_counts[u]), q, tag);
    };
    const auto receive = [&] {
      if (receive_counts[u] > 0) {
        pending.push_back(group.RecvAsync(received.narrow(0, got, receive_counts[u]), q, tag));
      }
    };
    if (me < q) {
      send();
      receive();
    } else {
      receive();
      send();
    }
    sent += send_counts[u];
    got += receive_counts[u];
  }
  for (const auto& work : pending) work->Wait();
  group.WaitSends();
  return received;
}

// Message tags on the cp group: forward (and backward's repeat of it) and gradients.
constexpr int kKeysTag = 0, kKeyGradientsTag = 1;

// The keys and values every query segment of this rank reads, [key rows, 2 * kv_heads, d]:
// this rank's rows of its shared documents go to their other ranks and theirs come back
// (ExchangeRows), and each segment's keys are picked from [local rows; received rows].
at::Tensor ExchangedKeys(const at::Tensor& kv, const at::Tensor& send_rows,
                         const at::Tensor& key_rows, const std::vector<std::int64_t>& send_counts,
                         const std::vector<std::int64_t>& receive_counts, CommGroup& group) {
  const at::Tensor outgoing = kv.index_select(0, send_rows).contiguous();
  const at::Tensor received = ExchangeRows(outgoing, send_counts, receive_counts, group, kKeysTag);
  return at::cat({kv, received}, 0).index_select(0, key_rows);
}

bool FlashAttentionRuns(const at::Tensor& q, const std::vector<std::int64_t>& cu_seqlens_q) {
  return UsesFlashAttention(q.device(), q.scalar_type(), q.size(-1)) && cu_seqlens_q.size() >= 2;
}

// Attention over exchanged keys whose backward exchanges them again instead of keeping them:
// the received keys and values of a layer are a transient, as docs/design.md's memory model
// ("Context parallelism", Memory) assumes, so a rank's memory per layer grows with its own
// tokens, not with the documents' prefixes. It saves the queries and the rank's own K/V
// rows (and, with the flash kernel, its output and log-sum-exp, so backward is the flash
// backward without recomputing the forward). Off the flash path (the CPU, fp32) backward
// recomputes the attention of its query segments from the received keys.
// Transfers per call: forward, the exchange of keys; backward, the exchange again and the
// keys' gradients back to their owners: the three transfers the cost model charges.
// The group and the rows travel through autograd's saved data (IValue has no slot for a raw
// pointer, so the group as an integer, as in transformer.cc); the rows are copied, because
// backward may run after the caller's ContextParallelRows is gone.
struct ExchangedAttentionFunction : public torch::autograd::Function<ExchangedAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& kv, const ContextParallelRows* rows,
                            CommGroup* group) {
    const std::vector<std::int64_t>& cu_q = rows->local.cu_seqlens;
    const std::int64_t kv_heads = kv.size(1) / 2;
    const at::Tensor keys = ExchangedKeys(kv, rows->send_rows, rows->key_rows, rows->send_counts,
                                          rows->receive_counts, *group);
    const at::Tensor k = keys.slice(1, 0, kv_heads);
    const at::Tensor v = keys.slice(1, kv_heads, 2 * kv_heads);
    at::Tensor out, logsumexp, rng_state, unused;
    if (FlashAttentionRuns(q, cu_q)) {
      std::tie(out, logsumexp, rng_state, unused, std::ignore) = at::_flash_attention_forward(
          q.contiguous(), k.contiguous(), v.contiguous(), rows->cu_seqlens_q_device,
          rows->cu_seqlens_k_device, LongestSegment(cu_q), LongestSegment(rows->cu_seqlens_k),
          /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false);
      ctx->save_for_backward({q, kv, out, logsumexp, rng_state, unused});
    } else {
      out = SdpaVarlenCausalAttention(q, k, v, cu_q, rows->cu_seqlens_k);
      ctx->save_for_backward({q, kv});
    }
    ctx->saved_data["group"] = reinterpret_cast<std::int64_t>(group);
    ctx->saved_data["send_rows"] = rows->send_rows;
    ctx->saved_data["key_rows"] = rows->key_rows;
    ctx->saved_data["send_counts"] = rows->send_counts;
    ctx->saved_data["receive_counts"] = rows->receive_counts;
    ctx->saved_data["cu_q"] = cu_q;
    ctx->saved_data["cu_k"] = rows->cu_seqlens_k;
    if (rows->cu_seqlens_q_device.defined()) {
      ctx->saved_data["cu_q_device"] = rows->cu_seqlens_q_device;
      ctx->saved_data["cu_k_device"] = rows->cu_seqlens_k_device;
    }
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor& q = saved[0];
    const at::Tensor& kv = saved[1];
    CommGroup& group = *reinterpret_cast<CommGroup*>(ctx->saved_data["group"].toInt());
    const at::Tensor send_rows = ctx->saved_data["send_rows"].toTensor();
    const at::Tensor key_rows = ctx->saved_data["key_rows"].toTensor();
    const std::vector<std::int64_t> send_counts = ctx->saved_data["send_counts"].toIntVector();
    const std::vector<std::int64_t> receive_counts =
        ctx->saved_data["receive_counts"].toIntVector();
    const std::vector<std::int64_t> cu_q = ctx->saved_data["cu_q"].toIntVector();
    const std::vector<std::int64_t> cu_k = ctx->saved_data["cu_k"].toIntVector();
    const std::int64_t kv_heads = kv.size(1) / 2;
    // A rank whose output reached no loss still takes part in both collectives.
    const at::Tensor grad_out =
        grads[0].defined() ? grads[0] : at::zeros_like(saved.size() > 2 ? saved[2] : q);
    const at::Tensor keys =
        ExchangedKeys(kv, send_rows, key_rows, send_counts, receive_counts, group);
    at::Tensor dq, dk, dv;
    if (saved.size() > 2) {  // flash: its own backward, from the saved output
      std::tie(dq, dk, dv) = at::_flash_attention_backward(
          grad_out.contiguous(), q.contiguous(), keys.slice(1, 0, kv_heads).contiguous(),
          keys.slice(1, kv_heads, 2 * kv_heads).contiguous(), saved[2], saved[3],
          ctx->saved_data["cu_q_device"].toTensor(), ctx->saved_data["cu_k_device"].toTensor(),
          LongestSegment(cu_q), LongestSegment(cu_k), /*dropout_p=*/0.0, /*is_causal=*/true,
          saved[4], saved[5]);
    } else {
      at::AutoGradMode grad_mode(true);
      const at::Tensor q_leaf = q.detach().requires_grad_(true);
      const at::Tensor keys_leaf = keys.detach().requires_grad_(true);
      const at::Tensor out =
          SdpaVarlenCausalAttention(q_leaf, keys_leaf.slice(1, 0, kv_heads),
                                    keys_leaf.slice(1, kv_heads, 2 * kv_heads), cu_q, cu_k);
      const torch::autograd::variable_list d =
          torch::autograd::grad({out}, {q_leaf, keys_leaf}, {grad_out}, /*retain_graph=*/false,
                                /*create_graph=*/false, /*allow_unused=*/true);
      dq = d[0].defined() ? d[0] : at::zeros_like(q);
      const at::Tensor dkeys = d[1].defined() ? d[1] : at::zeros_like(keys);
      dk = dkeys.slice(1, 0, kv_heads);
      dv = dkeys.slice(1, kv_heads, 2 * kv_heads);
    }
    // Back through the pick: every key row's gradient goes to its row of [local; received];
    // the received rows' gradients go back to the ranks that sent them, and this rank adds
    // the gradients of the rows it sent.
    const std::int64_t local_rows = kv.size(0);
    std::int64_t received_rows = 0;
    for (std::int64_t c : receive_counts) received_rows += c;
    at::Tensor grad_all =
        at::zeros({local_rows + received_rows, kv.size(1), kv.size(2)}, kv.options())
            .index_add_(0, key_rows, at::cat({dk, dv}, 1).to(kv.scalar_type()));
    at::Tensor grad_kv = grad_all.narrow(0, 0, local_rows).clone();
    const at::Tensor grad_received = grad_all.narrow(0, local_rows, received_rows).contiguous();
    const at::Tensor grad_sent =
        ExchangeRows(grad_received, receive_counts, send_counts, group, kKeyGradientsTag);
    grad_kv.index_add_(0, send_rows, grad_sent);
    return {dq, grad_kv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

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
    // K and V side by side: one message for both. Every rank calls the function, one whose
    // queries read no received row (or that has no token) included, so its backward answers
    // the messages the other ranks send it.
    out = ExchangedAttentionFunction::apply(q_real, at::cat({k, v}, 1), &rows, &cp_group);
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
