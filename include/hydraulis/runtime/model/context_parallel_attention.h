// Causal attention of a packed micro-batch whose documents lie on the ranks of a context
// parallel (cp) group (local_tokens.h): a document whole on one rank attends there alone; a
// document over k ranks (2*k chunks, its j-th rank holding chunks j and 2*k-1-j) needs the
// keys and values of the chunks before each of a rank's chunks, which its k ranks exchange
// point to point on the cp group's communicator, and again in backward (the exchanged keys
// are not kept). Keys and values travel only among a document's own ranks.
#pragma once

#include <ATen/ATen.h>

#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/local_tokens.h"

namespace hydraulis {

// The rows ContextParallelAttention reads on one rank for one micro-batch, derived from the
// layout alone: made once per micro-batch on the model's device and read by every layer
// (each call would otherwise rebuild them on the host and copy them to the device).
struct ContextParallelRows {
  LocalTokenLayout local;
  // Per cp rank q: how many rows this rank sends q (its rows of the documents they share) and
  // receives from q (q's rows of them); 0 for itself. The received rows lie after the
  // rank's own in the key buffer, by sender in rank order, each sender's in document order.
  std::vector<std::int64_t> send_counts, receive_counts;
  // int64 on the device: the storage rows of the real tokens, in segment order (undefined
  // without padding); the storage rows this rank sends, by receiver in rank order; per query
  // segment, the rows of its keys in [storage rows; received rows].
  at::Tensor real_rows, send_rows, key_rows;
  // Per query segment, its number of keys, cumulative (a placed document's own tokens, a
  // sharded chunk [b, e)'s e).
  std::vector<std::int64_t> cu_seqlens_k;
  // int32 copies of local.cu_seqlens and cu_seqlens_k for the flash kernel (on CUDA only).
  at::Tensor cu_seqlens_q_device, cu_seqlens_k_device;
};
// The rows of `local`, with their tensors on `device` (the model's).
ContextParallelRows MakeContextParallelRows(const LocalTokenLayout& local, at::Device device);

// Rank local.rank's share (local = rows.local) of PackedCausalAttention over the whole
// micro-batch. q: [rows, heads, head_dim], k, v: [rows, kv_heads, head_dim] (kv_heads
// dividing heads), over the rank's storage rows (rows = local.storage_tokens(), padding
// rows included, any values).
// Returns [rows, heads, head_dim] in q's row order: for a real token, the attention output
// it has in the whole micro-batch (a chunk [b, e) of a sharded document attends causally
// to the document's keys [0, e)); zero on padding rows. Differentiable; the backward gathers
// the keys and values again rather than keeping them from forward (a layer's gathered K/V
// is a transient, as the memory model assumes) and sends every rank the gradient of its own
// keys and values from every rank's queries (a reduce-scatter).
//
// Communication, sized by local.lengths and local.layout alone, so that every pair of ranks
// derives the same messages: for each other rank q sharing a document with this one, in
// rank order, one send of this rank's rows of their documents and one receive of q's (the
// lower rank of a pair sends first, the order NCCL's unbatched point-to-point needs); in
// backward the same exchange again and then the keys' gradients sent back to their owners.
// A rank sharing no document with another communicates nothing. Every rank of `cp_group`
// calls this for every micro-batch, in the same order.
// InvalidInput when the shapes do not match the layout, the group is not the layout's
// (size cp, this rank local.rank) or the rows were made for another device.
at::Tensor ContextParallelAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const ContextParallelRows& rows, CommGroup& cp_group);
// The same with the rows made for this one call.
at::Tensor ContextParallelAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const LocalTokenLayout& local, CommGroup& cp_group);

}  // namespace hydraulis
