#include "hydraulis/data/megatron_dataset.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <utility>

#include "hydraulis/base/error.h"
#include "hydraulis/base/little_endian.h"
#include "hydraulis/base/mapped_file.h"

namespace hydraulis {
namespace {

constexpr std::int64_t kUInt16Ids = std::int64_t{std::numeric_limits<std::uint16_t>::max()} + 1;
constexpr char kMagic[kMegatronMagicBytes] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kVersion = 1;

bool IsFloat(MegatronDType dtype) {
  return dtype == MegatronDType::kFloat32 || dtype == MegatronDType::kFloat64;
}

// Calls f.template operator()<T>() with T the C++ type of the integer dtype `dtype`.
template <typename F>
decltype(auto) WithIdType(MegatronDType dtype, F&& f) {
  switch (dtype) {
    case MegatronDType::kUInt8:
      return f.template operator()<std::uint8_t>();
    case MegatronDType::kInt8:
      return f.template operator()<std::int8_t>();
    case MegatronDType::kInt16:
      return f.template operator()<std::int16_t>();
    case MegatronDType::kUInt16:
      return f.template operator()<std::uint16_t>();
    case MegatronDType::kInt32:
      return f.template operator()<std::int32_t>();
    case MegatronDType::kInt64:
      return f.template operator()<std::int64_t>();
    case MegatronDType::kFloat32:
    case MegatronDType::kFloat64:
      break;
  }
  throw InternalError("not an integer dtype: " + std::string(MegatronDTypeName(dtype)));
}

// The largest token id `dtype` stores; ids are never negative.
std::int64_t MaxId(MegatronDType dtype) {
  return WithIdType(
      dtype, []<typename T>() { return static_cast<std::int64_t>(std::numeric_limits<T>::max()); });
}

void AppendLittleEndian(std::string& out, std::uint64_t v, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

template <typename T>
void DecodeTokens(const std::byte* p, std::size_t count, std::vector<std::int64_t>& out) {
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back(static_cast<std::int64_t>(LoadLittleEndian<T>(p + i * sizeof(T))));
  }
}

void DecodeTokens(MegatronDType dtype, const std::byte* p, std::size_t count,
                  std::vector<std::int64_t>& out) {
  WithIdType(dtype, [&]<typename T>() { DecodeTokens<T>(p, count, out); });
}

// The index of the first of `count` tokens of type T at `p` outside [0, vocab), or count.
template <typename T>
std::size_t FirstIdOutside(const std::byte* p, std::size_t count, std::int64_t vocab) {
  for (std::size_t i = 0; i < count; ++i) {
    const auto id = static_cast<std::int64_t>(LoadLittleEndian<T>(p + i * sizeof(T)));
    if (id < 0 || id >= vocab) return i;
  }
  return count;
}

std::size_t FirstIdOutside(MegatronDType dtype, const std::byte* p, std::size_t count,
                           std::int64_t vocab) {
  return WithIdType(dtype, [&]<typename T>() { return FirstIdOutside<T>(p, count, vocab); });
}

}  // namespace

MegatronDType MegatronDTypeForVocab(std::int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > std::int64_t{std::numeric_limits<std::int32_t>::max()} + 1) {
    throw InvalidInput("vocabulary size " + std::to_string(vocab_size) +
                       ": must be between 1 and 2^31 for a Megatron-LM dataset");
  }
  return vocab_size <= kUInt16Ids ? MegatronDType::kUInt16 : MegatronDType::kInt32;
}

std::string_view MegatronDTypeName(MegatronDType dtype) {
  switch (dtype) {
    case MegatronDType::kUInt8:
      return "uint8";
    case MegatronDType::kInt8:
      return "int8";
    case MegatronDType::kInt16:
      return "int16";
    case MegatronDType::kInt32:
      return "int32";
    case MegatronDType::kInt64:
      return "int64";
    case MegatronDType::kFloat64:
      return "float64";
    case MegatronDType::kFloat32:
      return "float32";
    case MegatronDType::kUInt16:
      return "uint16";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// Reading.

struct MegatronDataset::State {
  std::string prefix;
  std::string bin_path;
  MegatronIndex index;
  MappedFile bin;
  std::int64_t num_tokens = 0;

  State(const std::string& p, MegatronIndex i, MappedFile b)
      : prefix(p), bin_path(p + ".bin"), index(std::move(i)), bin(std::move(b)) {}

  void CheckDocument(std::size_t d) const {
    if (d + 1 >= index.document_indices.size()) {
      throw InvalidInput(bin_path + ": document " + std::to_string(d) + " out of range (" +
                         std::to_string(index.document_indices.size() - 1) + " documents)");
    }
  }
};

MegatronDataset::MegatronDataset(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx";
  MegatronIndex index = ReadMegatronIndex(idx_path);
  if (IsFloat(index.dtype)) {
    throw InvalidInput(idx_path + ": dtype: " + std::string(MegatronDTypeName(index.dtype)) +
                       " tokens are not token ids (expected an integer dtype)");
  }
  const std::string bin_path = prefix + ".bin";
  MappedFile bin(bin_path);
  // The index reader checked that pointers are contiguous and cannot overflow, so the
  // last sequence's end is the exact size the tokens occupy.
  std::int64_t expected_bytes = 0;
  if (!index.sequence_lengths.empty()) {
    expected_bytes = index.sequence_pointers.back() +
                     std::int64_t{index.sequence_lengths.back()} * MegatronDTypeBytes(index.dtype);
  }
  const auto actual_bytes = static_cast<std::int64_t>(bin.bytes().size());
  if (actual_bytes != expected_bytes) {
    throw InvalidInput(bin_path + ": size " + std::to_string(actual_bytes) + " bytes, but " +
                       idx_path + " says " + std::to_string(expected_bytes) + " (" +
                       std::to_string(index.sequence_lengths.size()) + " sequences of " +
                       std::string(MegatronDTypeName(index.dtype)) + ")" +
                       (actual_bytes < expected_bytes ? ": truncated" : ": trailing bytes"));
  }
  state_ = std::make_unique<State>(prefix, std::move(index), std::move(bin));
  for (std::int32_t len : state_->index.sequence_lengths) state_->num_tokens += len;
}

MegatronDataset::~MegatronDataset() = default;
MegatronDataset::MegatronDataset(MegatronDataset&& other) noexcept = default;
MegatronDataset& MegatronDataset::operator=(MegatronDataset&& other) noexcept = default;

const std::string& MegatronDataset::prefix() const { return state_->prefix; }
MegatronDType MegatronDataset::dtype() const { return state_->index.dtype; }
std::size_t MegatronDataset::num_documents() const {
  return state_->index.document_indices.size() - 1;
}
std::int64_t MegatronDataset::num_tokens() const { return state_->num_tokens; }

std::int64_t MegatronDataset::DocumentLength(std::size_t i) const {
  state_->CheckDocument(i);
  const MegatronIndex& index = state_->index;
  std::int64_t tokens = 0;
  for (auto s = index.document_indices[i]; s < index.document_indices[i + 1]; ++s) {
    tokens += index.sequence_lengths[static_cast<std::size_t>(s)];
  }
  return tokens;
}

std::vector<std::int64_t> MegatronDataset::Document(std::size_t i) const {
  const MegatronIndex& index = state_->index;
  std::vector<std::int64_t> tokens;
  tokens.reserve(static_cast<std::size_t>(DocumentLength(i)));
  const std::byte* base = state_->bin.bytes().data();
  for (auto s = index.document_indices[i]; s < index.document_indices[i + 1]; ++s) {
    const auto seq = static_cast<std::size_t>(s);
    DecodeTokens(index.dtype, base + index.sequence_pointers[seq],
                 static_cast<std::size_t>(index.sequence_lengths[seq]), tokens);
  }
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0) {
      throw InvalidInput(state_->bin_path + ": document " + std::to_string(i) + ", token " +
                         std::to_string(t) + ": negative id " + std::to_string(tokens[t]));
    }
  }
  return tokens;
}

// ---------------------------------------------------------------------------------------
// Writing.

MegatronDatasetWriter::MegatronDatasetWriter(const std::string& prefix, MegatronDType dtype)
    : bin_path_(prefix + ".bin"),
      idx_path_(prefix + ".idx"),
      bin_tmp_(bin_path_ + ".tmp"),
      idx_tmp_(idx_path_ + ".tmp"),
      dtype_(dtype),
      max_id_(0) {
  if (IsFloat(dtype)) {
    throw InvalidInput(bin_path_ + ": cannot write " + std::string(MegatronDTypeName(dtype)) +
                       " tokens (token ids need an integer dtype)");
  }
  max_id_ = MaxId(dtype);
  bin_.open(bin_tmp_, std::ios::binary | std::ios::trunc);
  if (!bin_) throw InvalidInput(bin_tmp_ + ": cannot create: " + std::strerror(errno));
}

MegatronDatasetWriter::~MegatronDatasetWriter() {
  if (!finished_) RemoveTemporaries();
}

void MegatronDatasetWriter::RemoveTemporaries() noexcept {
  if (bin_.is_open()) bin_.close();
  std::remove(bin_tmp_.c_str());
  std::remove(idx_tmp_.c_str());
}

void MegatronDatasetWriter::AddDocument(std::span<const std::int64_t> tokens) {
  if (finished_) throw InternalError(bin_path_ + ": AddDocument after Finish");
  const std::int64_t doc = num_documents();
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw InvalidInput(bin_path_ + ": document " + std::to_string(doc) + ": " +
                       std::to_string(tokens.size()) +
                       " tokens, more than a Megatron-LM sequence holds (2^31 - 1)");
  }
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] > max_id_) {
      throw InvalidInput(bin_path_ + ": document " + std::to_string(doc) + ", token " +
                         std::to_string(t) + ": id " + std::to_string(tokens[t]) +
                         " does not fit " + std::string(MegatronDTypeName(dtype_)) + " (0 to " +
                         std::to_string(max_id_) + ")");
    }
  }
  const auto token_bytes = static_cast<std::size_t>(MegatronDTypeBytes(dtype_));
  buffer_.clear();
  buffer_.reserve(tokens.size() * token_bytes);
  for (std::int64_t id : tokens) {
    AppendLittleEndian(buffer_, static_cast<std::uint64_t>(id), token_bytes);
  }
  bin_.write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  if (!bin_) throw IoError(bin_tmp_ + ": write failed: " + std::strerror(errno));
  lengths_.push_back(static_cast<std::int32_t>(tokens.size()));
  num_tokens_ += static_cast<std::int64_t>(tokens.size());
}

void MegatronDatasetWriter::Finish() {
  if (finished_) throw InternalError(bin_path_ + ": Finish called twice");
  bin_.close();
  if (!bin_) {
    RemoveTemporaries();
    throw IoError(bin_tmp_ + ": write failed");
  }

  const std::size_t sequences = lengths_.size();
  std::string idx(kMagic, kMegatronMagicBytes);
  AppendLittleEndian(idx, kVersion, sizeof(std::uint64_t));
  AppendLittleEndian(idx, static_cast<std::uint8_t>(dtype_), sizeof(std::uint8_t));
  AppendLittleEndian(idx, sequences, sizeof(std::uint64_t));
  AppendLittleEndian(idx, sequences + 1, sizeof(std::uint64_t));  // document_indices 0..n
  for (std::int32_t len : lengths_) {
    AppendLittleEndian(idx, static_cast<std::uint32_t>(len), sizeof(std::int32_t));
  }
  const std::int64_t token_bytes = MegatronDTypeBytes(dtype_);
  std::int64_t pointer = 0;
  for (std::int32_t len : lengths_) {
    AppendLittleEndian(idx, static_cast<std::uint64_t>(pointer), sizeof(std::int64_t));
    pointer += std::int64_t{len} * token_bytes;
  }
  for (std::size_t d = 0; d <= sequences; ++d) {
    AppendLittleEndian(idx, d, sizeof(std::int64_t));
  }
  {
    std::ofstream out(idx_tmp_, std::ios::binary | std::ios::trunc);
    if (!out) {
      const std::string reason = std::strerror(errno);
      RemoveTemporaries();
      throw InvalidInput(idx_tmp_ + ": cannot create: " + reason);
    }
    out.write(idx.data(), static_cast<std::streamsize>(idx.size()));
    out.close();
    if (!out) {
      RemoveTemporaries();
      throw IoError(idx_tmp_ + ": write failed");
    }
  }
  // The .bin first: once the new .idx is visible, the .bin it describes is already there.
  for (const auto& [from, to] : {std::pair{&bin_tmp_, &bin_path_}, {&idx_tmp_, &idx_path_}}) {
    std::error_code ec;
    std::filesystem::rename(*from, *to, ec);
    if (ec) {
      RemoveTemporaries();
      throw IoError(*to + ": cannot rename " + *from + " into place: " + ec.message());
    }
  }
  finished_ = true;
}

std::optional<MegatronDataset::IdOutside> MegatronDataset::FindIdOutside(
    std::int64_t vocab_size) const {
  const MegatronIndex& index = state_->index;
  const bool is_signed =
      index.dtype == MegatronDType::kInt8 || index.dtype == MegatronDType::kInt16 ||
      index.dtype == MegatronDType::kInt32 || index.dtype == MegatronDType::kInt64;
  if (!is_signed && MaxId(index.dtype) < vocab_size) return std::nullopt;
  const std::byte* base = state_->bin.bytes().data();
  std::size_t document = 0;
  std::int64_t position = 0;  // tokens of `document` before the current sequence
  for (std::size_t seq = 0; seq < index.sequence_lengths.size(); ++seq) {
    while (static_cast<std::int64_t>(seq) >= index.document_indices[document + 1]) {
      ++document;
      position = 0;
    }
    const auto count = static_cast<std::size_t>(index.sequence_lengths[seq]);
    const std::byte* p = base + index.sequence_pointers[seq];
    const std::size_t at = FirstIdOutside(index.dtype, p, count, vocab_size);
    if (at < count) {
      std::vector<std::int64_t> id;
      DecodeTokens(index.dtype, p + at * static_cast<std::size_t>(MegatronDTypeBytes(index.dtype)),
                   1, id);
      return IdOutside{document, position + static_cast<std::int64_t>(at), id[0]};
    }
    position += static_cast<std::int64_t>(count);
  }
  return std::nullopt;
}

void MegatronDataset::RequireIdsInVocabulary(std::int64_t vocab_size,
                                             const std::string& model_source) const {
  if (const auto bad = FindIdOutside(vocab_size)) {
    throw InvalidInput(state_->bin_path + ": document " + std::to_string(bad->document) +
                       ", token " + std::to_string(bad->position) + ": id " +
                       std::to_string(bad->id) + " is outside the vocabulary of " + model_source +
                       " (" + std::to_string(vocab_size) +
                       " ids); was the data tokenized for another model?");
  }
}

}  // namespace hydraulis
