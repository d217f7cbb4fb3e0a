// Megatron-LM indexed datasets (megatron/core/datasets/indexed_dataset.py): the .idx index
// that sits beside the .bin token file. Only the index is read, memory-mapped; document
// lengths come from it without touching the .bin.
//
// Layout (little-endian): 9-byte magic "MMIDIDX\0\0", uint64 version (1), uint8 dtype
// code, uint64 sequence_count, uint64 document_count, int32
// sequence_lengths[sequence_count], int64 sequence_pointers[sequence_count], int64
// document_indices[document_count], and, in multimodal indices only, int8
// sequence_modes[sequence_count].
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hydraulis {

// Token dtype of the .bin; the code is the byte stored in the index.
enum class MegatronDType : std::uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

// Bytes per token of `dtype` (1, 2, 4 or 8).
std::int64_t MegatronDTypeBytes(MegatronDType dtype);

// A validated index, copied out of the file.
struct MegatronIndex {
  std::uint64_t version = 1;
  MegatronDType dtype = MegatronDType::kInt32;
  std::vector<std::int32_t> sequence_lengths;   // tokens per sequence, each >= 0
  std::vector<std::int64_t> sequence_pointers;  // byte offset of each sequence in the .bin
  // Document d is sequences [document_indices[d], document_indices[d + 1]): one more
  // entry than there are documents, starting at 0 and ending at the sequence count.
  std::vector<std::int64_t> document_indices;
  std::vector<std::int8_t> sequence_modes;  // empty unless the index is multimodal
};

// Fixed sizes of the format.
inline constexpr std::size_t kMegatronMagicBytes = 9;
inline constexpr std::size_t kMegatronHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic to counts

// Parses and validates index bytes: magic, version 1, a known dtype code, the file size
// against the counts (truncated, or trailing bytes other than the multimodal modes),
// sequence lengths >= 0, pointers starting at 0 and each the previous one plus the
// previous length times the dtype size, document indices starting at 0, non-decreasing,
// ending at sequence_count. InvalidInput "<source>: <field>: <problem>" on the first
// violation, e.g. "data.idx: document_indices[3]: not non-decreasing (5 after 7)".
MegatronIndex ParseMegatronIndex(std::span<const std::byte> bytes, const std::string& source);

// ParseMegatronIndex on the memory-mapped file at `path`.
MegatronIndex ReadMegatronIndex(const std::string& path);

// Document lengths in tokens (the sum of each document's sequence lengths), in document
// order. Empty documents are rejected (InvalidInput naming the document) unless
// skip_empty, which drops them.
std::vector<std::int64_t> MegatronDocumentLengths(const MegatronIndex& index,
                                                  const std::string& source, bool skip_empty);

// Validates the memory-mapped index at `path` exactly as ReadMegatronIndex and returns
// MegatronDocumentLengths of it, without copying the index's arrays.
std::vector<std::int64_t> ReadMegatronDocumentLengths(const std::string& path, bool skip_empty);

}  // namespace hydraulis
