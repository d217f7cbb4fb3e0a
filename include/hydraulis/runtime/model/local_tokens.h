// One cp rank's share of a context-parallel micro-batch: which token runs it holds
// (cost/cp_layout.h's RankSegments), where they lie in its storage, and its model inputs
// (token ids, rotary positions, next-token targets) built from the whole micro-batch.
//
// Two offset arrays, as TransformerEngine's THD format (cu_seqlens and cu_seqlens_padded):
// `cu_seqlens` counts real tokens only (what attention masks and the loss counts), while
// `storage_offsets` says where each segment starts in the rank's tensors, which may leave
// padding rows after a segment (e.g. to keep segments aligned for a kernel). Padding rows
// are never attended to, never attend, and carry no target.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/runtime/model/packed_batch.h"

namespace hydraulis {

// Where cp rank `rank`'s segments of one micro-batch lie in its storage.
struct LocalTokenLayout {
  int cp = 1;
  int rank = 0;
  // The whole micro-batch: every document's length and its CpLayout (empty: cp = 1).
  std::vector<std::int64_t> lengths;
  CpLayout layout;
  // RankSegments(lengths, layout, cp, rank), in local order.
  std::vector<RankSegment> segments;
  // Real tokens: segment i holds cu_seqlens[i + 1] - cu_seqlens[i] of them
  // (segments.size() + 1 entries, starting at 0).
  std::vector<std::int64_t> cu_seqlens;
  // Storage: segment i's real tokens are rows [storage_offsets[i], storage_offsets[i] +
  // its size) of the rank's tensors; rows from there to storage_offsets[i + 1] are padding
  // (segments.size() + 1 entries; back() is the number of rows).
  std::vector<std::int64_t> storage_offsets;

  std::int64_t real_tokens() const { return cu_seqlens.back(); }
  std::int64_t storage_tokens() const { return storage_offsets.back(); }
  bool has_padding() const { return real_tokens() != storage_tokens(); }
  // Whether some document of the micro-batch is sharded over the cp ranks (then the ranks
  // communicate in attention; otherwise every document is whole on one rank).
  bool has_sharded_documents() const;
};

// The layout of rank `rank` of a cp group with every segment's storage rounded up to a
// multiple of `pad_multiple` rows (1: no padding). InvalidInput when a length is not
// positive, pad_multiple < 1, or the layout does not fit (RankSegments' checks).
LocalTokenLayout MakeLocalTokenLayout(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                      int cp, int rank, std::int64_t pad_multiple = 1);

// A rank's model inputs, all over its storage rows (padding rows: token 0, position 0).
struct LocalTokens {
  // int64 [storage_tokens]: the token ids.
  at::Tensor tokens;
  // int64 [storage_tokens]: each token's position in its own document (the rotary
  // position it has in the whole micro-batch, not its local row).
  at::Tensor positions;
  // int64 [storage_tokens]: each row's index in the whole packed micro-batch; -1 for
  // padding.
  at::Tensor source_rows;
  // As NextTokenTargetsOf: `inputs` the storage rows that have a target (every real token
  // but its document's last, whichever rank holds the next token), `targets` the document's
  // next token id. Padding rows are never among the inputs.
  NextTokenTargets targets;
};

// Rank `local.rank`'s inputs, from the micro-batch's `tokens` (int64 [sum of lengths], all
// documents concatenated in order), on tokens' device. InvalidInput when the token count
// does not match the lengths.
LocalTokens LocalTokensOf(const at::Tensor& tokens, const LocalTokenLayout& local);

}  // namespace hydraulis
