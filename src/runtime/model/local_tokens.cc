#include "hydraulis/runtime/model/local_tokens.h"

#include <algorithm>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/model/host_copy.h"

namespace hydraulis {

bool LocalTokenLayout::has_sharded_documents() const {
  for (std::size_t d = 0; d < layout.size(); ++d) {
    if (layout.Width(d) > 1) return true;
  }
  return false;
}

LocalTokenLayout MakeLocalTokenLayout(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                      int cp, int rank, std::int64_t pad_multiple) {
  if (pad_multiple < 1) {
    throw InvalidInput("local tokens: the padding multiple must be >= 1, got " +
                       std::to_string(pad_multiple));
  }
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    if (lengths[d] < 1) {
      throw InvalidInput("local tokens: document " + std::to_string(d) + " has length " +
                         std::to_string(lengths[d]) + "; every document needs a token");
    }
  }
  LocalTokenLayout local;
  local.cp = cp;
  local.rank = rank;
  local.lengths.assign(lengths.begin(), lengths.end());
  local.layout = layout;
  local.segments = RankSegments(lengths, layout, cp, rank);
  local.cu_seqlens.push_back(0);
  local.storage_offsets.push_back(0);
  for (const RankSegment& s : local.segments) {
    const std::int64_t size = s.range.Size();
    local.cu_seqlens.push_back(local.cu_seqlens.back() + size);
    const std::int64_t stored = (size + pad_multiple - 1) / pad_multiple * pad_multiple;
    local.storage_offsets.push_back(local.storage_offsets.back() + stored);
  }
  return local;
}

LocalTokens LocalTokensOf(const at::Tensor& tokens, const LocalTokenLayout& local) {
  std::int64_t total = 0;
  std::vector<std::int64_t> starts;  // each document's first row in the micro-batch
  for (std::int64_t length : local.lengths) {
    starts.push_back(total);
    total += length;
  }
  if (!tokens.defined() || tokens.dim() != 1 || tokens.scalar_type() != at::kLong ||
      tokens.size(0) != total) {
    throw InvalidInput("local tokens: the micro-batch's tokens must be a 1-D int64 tensor of " +
                       std::to_string(total) + " ids (the sum of the document lengths)");
  }
  const std::int64_t rows = local.storage_tokens();
  std::vector<std::int64_t> source(static_cast<std::size_t>(rows), -1);
  std::vector<std::int64_t> positions(static_cast<std::size_t>(rows), 0);
  std::vector<std::int64_t> inputs, next_rows;
  for (std::size_t i = 0; i < local.segments.size(); ++i) {
    const RankSegment& s = local.segments[i];
    const std::int64_t length = local.lengths[static_cast<std::size_t>(s.document)];
    const std::int64_t first = starts[static_cast<std::size_t>(s.document)];
    for (std::int64_t p = s.range.begin; p < s.range.end; ++p) {
      const std::int64_t row = local.storage_offsets[i] + (p - s.range.begin);
      source[static_cast<std::size_t>(row)] = first + p;
      positions[static_cast<std::size_t>(row)] = p;
      // The next token may sit in another chunk, on another rank: it is read from the
      // whole micro-batch, so a chunk's last token keeps its target.
      if (p + 1 < length) {
        inputs.push_back(row);
        next_rows.push_back(first + p + 1);
      }
    }
  }
  const at::Device device = tokens.device();
  LocalTokens out;
  out.source_rows = IndicesOn(source, device);
  out.positions = IndicesOn(positions, device);
  out.tokens = at::where(out.source_rows >= 0, tokens.index_select(0, out.source_rows.clamp_min(0)),
                         at::zeros({}, tokens.options()));
  out.targets.inputs = IndicesOn(inputs, device);
  out.targets.targets = tokens.index_select(0, IndicesOn(next_rows, device));
  return out;
}

}  // namespace hydraulis
