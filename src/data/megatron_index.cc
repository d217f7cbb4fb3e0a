#include "hydraulis/data/megatron_index.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "hydraulis/base/error.h"
#include "hydraulis/base/little_endian.h"
#include "hydraulis/base/mapped_file.h"
#include "hydraulis/data/document_length.h"

namespace hydraulis {
namespace {

constexpr char kMagic[kMegatronMagicBytes] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
// The pre-mmap Megatron/fairseq index ("TNTIDX\0\0"): a different layout we do not read.
constexpr char kLegacyMagic[8] = {'T', 'N', 'T', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kSupportedVersion = 1;
constexpr std::size_t kVersionOffset = kMegatronMagicBytes;
constexpr std::size_t kDTypeOffset = kVersionOffset + 8;
constexpr std::size_t kSequenceCountOffset = kDTypeOffset + 1;
constexpr std::size_t kDocumentCountOffset = kSequenceCountOffset + 8;
static_assert(kDocumentCountOffset + 8 == kMegatronHeaderBytes);
constexpr std::size_t kLengthBytes = sizeof(std::int32_t);
constexpr std::size_t kPointerBytes = sizeof(std::int64_t);
constexpr std::size_t kDocumentIndexBytes = sizeof(std::int64_t);
constexpr std::size_t kModeBytes = sizeof(std::int8_t);
// Counts are uint64 in the file and are compared with the file size as size_t.
static_assert(sizeof(std::size_t) >= sizeof(std::uint64_t), "needs a 64-bit size_t");

// A validated view over index bytes. The constructor checks every field; the accessors
// then read the arrays in place.
class IndexView {
 public:
  IndexView(std::span<const std::byte> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {
    ValidateHeader();
    ValidateArrays();
  }

  std::uint64_t version() const { return version_; }
  MegatronDType dtype() const { return dtype_; }
  std::size_t sequence_count() const { return sequence_count_; }
  std::size_t document_count() const { return document_count_; }
  bool multimodal() const { return multimodal_; }

  std::int32_t length(std::size_t i) const {
    return LoadLittleEndian<std::int32_t>(bytes_.data() + lengths_at_ + i * kLengthBytes);
  }
  std::int64_t pointer(std::size_t i) const {
    return LoadLittleEndian<std::int64_t>(bytes_.data() + pointers_at_ + i * kPointerBytes);
  }
  std::int64_t document_index(std::size_t i) const {
    return LoadLittleEndian<std::int64_t>(bytes_.data() + documents_at_ + i * kDocumentIndexBytes);
  }
  std::int8_t mode(std::size_t i) const {
    return LoadLittleEndian<std::int8_t>(bytes_.data() + modes_at_ + i * kModeBytes);
  }

 private:
  [[noreturn]] void Fail(const std::string& field, const std::string& problem) const {
    throw InvalidInput(source_ + ": " + field + ": " + problem);
  }

  void NeedHeaderBytes(std::size_t end, const std::string& field) const {
    if (bytes_.size() < end) {
      Fail(field, "truncated file (" + std::to_string(bytes_.size()) + " bytes; the header needs " +
                      std::to_string(kMegatronHeaderBytes) + ")");
    }
  }

  // Reserves count elements of elem_bytes at the cursor; the check divides rather than
  // multiplies so an absurd count cannot overflow into a small size.
  std::size_t TakeArray(std::size_t count, std::size_t elem_bytes, const std::string& field,
                        const std::string& count_name) {
    const std::size_t left = bytes_.size() - cursor_;
    if (count > left / elem_bytes) {
      Fail(field, "truncated file: " + count_name + " " + std::to_string(count) + " needs " +
                      std::to_string(elem_bytes) + " bytes each from offset " +
                      std::to_string(cursor_) + ", but the file has " +
                      std::to_string(bytes_.size()) + " bytes");
    }
    const std::size_t at = cursor_;
    cursor_ += count * elem_bytes;
    return at;
  }

  void ValidateHeader() {
    const std::size_t magic_seen = std::min(bytes_.size(), kMegatronMagicBytes);
    if (bytes_.size() >= sizeof(kLegacyMagic) &&
        std::memcmp(bytes_.data(), kLegacyMagic, sizeof(kLegacyMagic)) == 0) {
      Fail("magic", "a legacy (non-mmap) Megatron index, which is not supported");
    }
    if (magic_seen > 0 && std::memcmp(bytes_.data(), kMagic, magic_seen) != 0) {
      Fail("magic", "not a Megatron-LM index (expected the bytes \"MMIDIDX\\0\\0\")");
    }
    NeedHeaderBytes(kVersionOffset, "magic");
    NeedHeaderBytes(kVersionOffset + 8, "version");
    version_ = LoadLittleEndian<std::uint64_t>(bytes_.data() + kVersionOffset);
    if (version_ != kSupportedVersion) {
      Fail("version", "unsupported version " + std::to_string(version_) + " (expected " +
                          std::to_string(kSupportedVersion) + ")");
    }
    NeedHeaderBytes(kDTypeOffset + 1, "dtype");
    const auto code = LoadLittleEndian<std::uint8_t>(bytes_.data() + kDTypeOffset);
    if (code < static_cast<std::uint8_t>(MegatronDType::kUInt8) ||
        code > static_cast<std::uint8_t>(MegatronDType::kUInt16)) {
      Fail("dtype", "unknown dtype code " + std::to_string(code) + " (expected 1 to 8)");
    }
    dtype_ = static_cast<MegatronDType>(code);
    NeedHeaderBytes(kSequenceCountOffset + 8, "sequence_count");
    NeedHeaderBytes(kDocumentCountOffset + 8, "document_count");
    const auto sequences = LoadLittleEndian<std::uint64_t>(bytes_.data() + kSequenceCountOffset);
    const auto documents = LoadLittleEndian<std::uint64_t>(bytes_.data() + kDocumentCountOffset);
    if (documents == 0) {
      Fail("document_count", "0, but document_indices always holds at least the start index 0");
    }
    sequence_count_ = static_cast<std::size_t>(sequences);
    document_count_ = static_cast<std::size_t>(documents);
    cursor_ = kMegatronHeaderBytes;
    lengths_at_ = TakeArray(sequence_count_, kLengthBytes, "sequence_lengths", "sequence_count");
    pointers_at_ = TakeArray(sequence_count_, kPointerBytes, "sequence_pointers", "sequence_count");
    documents_at_ =
        TakeArray(document_count_, kDocumentIndexBytes, "document_indices", "document_count");
    const std::size_t extra = bytes_.size() - cursor_;
    // Multimodal indices append one mode byte per sequence; anything else is damage.
    if (extra != 0 && extra != sequence_count_ * kModeBytes) {
      Fail("file size", std::to_string(bytes_.size()) + " bytes, but the counts give " +
                            std::to_string(cursor_) + " (or " +
                            std::to_string(cursor_ + sequence_count_ * kModeBytes) +
                            " with multimodal sequence_modes)");
    }
    multimodal_ = extra != 0;
    modes_at_ = cursor_;
  }

  void ValidateArrays() const {
    const std::int64_t token_bytes = MegatronDTypeBytes(dtype_);
    std::int64_t expected_pointer = 0;
    for (std::size_t i = 0; i < sequence_count_; ++i) {
      const std::string at = "[" + std::to_string(i) + "]";
      const std::int32_t len = length(i);
      if (len < 0) Fail("sequence_lengths" + at, "negative length " + std::to_string(len));
      const std::int64_t ptr = pointer(i);
      if (ptr != expected_pointer) {
        Fail("sequence_pointers" + at,
             std::to_string(ptr) + ", expected " + std::to_string(expected_pointer) +
                 (i == 0 ? std::string(" (the first sequence starts the .bin)")
                         : " (the previous pointer plus the previous length times " +
                               std::to_string(token_bytes) + " bytes)"));
      }
      if (__builtin_add_overflow(ptr, std::int64_t{len} * token_bytes, &expected_pointer)) {
        Fail("sequence_pointers" + at, "byte offsets overflow int64");
      }
    }
    const auto sequences = static_cast<std::int64_t>(sequence_count_);
    std::int64_t previous = 0;
    for (std::size_t i = 0; i < document_count_; ++i) {
      const std::string field = "document_indices[" + std::to_string(i) + "]";
      const std::int64_t index = document_index(i);
      if (i == 0 && index != 0) {
        Fail(field, std::to_string(index) + ", expected 0 (the first document starts at 0)");
      }
      if (index < previous) {
        Fail(field, "not non-decreasing (" + std::to_string(index) + " after " +
                        std::to_string(previous) + ")");
      }
      if (index > sequences) {
        Fail(field, std::to_string(index) + " is past sequence_count " + std::to_string(sequences));
      }
      previous = index;
    }
    if (previous != sequences) {
      Fail("document_indices[" + std::to_string(document_count_ - 1) + "]",
           std::to_string(previous) + ", expected sequence_count " + std::to_string(sequences) +
               " (the last index ends the sequence list)");
    }
  }

  std::span<const std::byte> bytes_;
  const std::string source_;
  std::uint64_t version_ = 0;
  MegatronDType dtype_ = MegatronDType::kInt32;
  std::size_t sequence_count_ = 0;
  std::size_t document_count_ = 0;
  bool multimodal_ = false;
  std::size_t cursor_ = 0;
  std::size_t lengths_at_ = 0;
  std::size_t pointers_at_ = 0;
  std::size_t documents_at_ = 0;
  std::size_t modes_at_ = 0;
};

// Shared by the copied and the in-place index: `document_index(i)` and `length(i)` read
// the two arrays, which are already validated.
template <typename DocumentIndex, typename Length>
std::vector<std::int64_t> SumDocuments(std::size_t document_count, DocumentIndex document_index,
                                       Length length, const std::string& source, bool skip_empty) {
  std::vector<std::int64_t> out;
  out.reserve(document_count - 1);
  for (std::size_t d = 0; d + 1 < document_count; ++d) {
    const auto begin = static_cast<std::size_t>(document_index(d));
    const auto end = static_cast<std::size_t>(document_index(d + 1));
    std::int64_t tokens = 0;
    for (std::size_t s = begin; s < end; ++s) {
      if (__builtin_add_overflow(tokens, std::int64_t{length(s)}, &tokens)) {
        throw InvalidInput(source + ": document " + std::to_string(d) + ": length overflows int64");
      }
    }
    if (tokens > kMaxDocumentTokens) {
      throw InvalidInput(source + ": document " + std::to_string(d) + ": " +
                         DocumentTooLongMessage(tokens));
    }
    if (tokens == 0) {
      if (skip_empty) continue;
      throw InvalidInput(source + ": document " + std::to_string(d) + " (sequences " +
                         std::to_string(begin) + " to " + std::to_string(end) +
                         "): no tokens; empty documents are rejected unless skipped");
    }
    out.push_back(tokens);
  }
  return out;
}

}  // namespace

std::int64_t MegatronDTypeBytes(MegatronDType dtype) {
  switch (dtype) {
    case MegatronDType::kUInt8:
    case MegatronDType::kInt8:
      return 1;
    case MegatronDType::kInt16:
    case MegatronDType::kUInt16:
      return 2;
    case MegatronDType::kInt32:
    case MegatronDType::kFloat32:
      return 4;
    case MegatronDType::kInt64:
    case MegatronDType::kFloat64:
      return 8;
  }
  throw InternalError("MegatronDTypeBytes: invalid dtype code " +
                      std::to_string(static_cast<int>(dtype)));
}

MegatronIndex ParseMegatronIndex(std::span<const std::byte> bytes, const std::string& source) {
  const IndexView view(bytes, source);
  MegatronIndex index;
  index.version = view.version();
  index.dtype = view.dtype();
  index.sequence_lengths.resize(view.sequence_count());
  index.sequence_pointers.resize(view.sequence_count());
  for (std::size_t i = 0; i < view.sequence_count(); ++i) {
    index.sequence_lengths[i] = view.length(i);
    index.sequence_pointers[i] = view.pointer(i);
  }
  index.document_indices.resize(view.document_count());
  for (std::size_t i = 0; i < view.document_count(); ++i) {
    index.document_indices[i] = view.document_index(i);
  }
  if (view.multimodal()) {
    index.sequence_modes.resize(view.sequence_count());
    for (std::size_t i = 0; i < view.sequence_count(); ++i) index.sequence_modes[i] = view.mode(i);
  }
  return index;
}

MegatronIndex ReadMegatronIndex(const std::string& path) {
  const MappedFile file(path);
  return ParseMegatronIndex(file.bytes(), path);
}

std::vector<std::int64_t> MegatronDocumentLengths(const MegatronIndex& index,
                                                  const std::string& source, bool skip_empty) {
  // A hand-built MegatronIndex has not been through the parser: check what SumDocuments
  // relies on (indices in range and ordered).
  const auto& docs = index.document_indices;
  const auto sequences = static_cast<std::int64_t>(index.sequence_lengths.size());
  if (docs.empty() || docs.front() != 0 || docs.back() != sequences) {
    throw InvalidInput(source +
                       ": document_indices: must start at 0 and end at the sequence count");
  }
  for (std::size_t i = 1; i < docs.size(); ++i) {
    if (docs[i] < docs[i - 1]) {
      throw InvalidInput(source + ": document_indices[" + std::to_string(i) +
                         "]: not non-decreasing");
    }
  }
  for (std::size_t i = 0; i < index.sequence_lengths.size(); ++i) {
    if (index.sequence_lengths[i] < 0) {
      throw InvalidInput(source + ": sequence_lengths[" + std::to_string(i) +
                         "]: negative length " + std::to_string(index.sequence_lengths[i]));
    }
  }
  return SumDocuments(
      docs.size(), [&](std::size_t i) { return docs[i]; },
      [&](std::size_t i) { return index.sequence_lengths[i]; }, source, skip_empty);
}

std::vector<std::int64_t> ReadMegatronDocumentLengths(const std::string& path, bool skip_empty) {
  const MappedFile file(path);
  const IndexView view(file.bytes(), path);
  return SumDocuments(
      view.document_count(), [&](std::size_t i) { return view.document_index(i); },
      [&](std::size_t i) { return view.length(i); }, path, skip_empty);
}

}  // namespace hydraulis
