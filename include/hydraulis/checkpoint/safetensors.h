// Hugging Face safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON header, then the tensors' raw bytes. The
// header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte
// offsets into the data section), plus an optional "__metadata__" map of strings.
// Reading maps the file and validates every header field before any tensor is touched;
// writing is atomic. Torch-free (the runtime converts bytes to tensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/base/mapped_file.h"

namespace hydraulis {

// Element types of the format (its names: "F32", "BF16", ...).
enum class SafetensorsDType : std::uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
};

// The format's name of `dtype` ("BF16").
std::string_view SafetensorsDTypeName(SafetensorsDType dtype);
// Bytes per element.
std::size_t SafetensorsDTypeBytes(SafetensorsDType dtype);

// One tensor of a file: where its bytes are in the data section.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets in the data section, [begin, end)
  std::uint64_t end = 0;
  std::int64_t numel() const;
};

// A parsed header: tensors in the order of their offsets, and the metadata.
struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
  std::uint64_t data_offset = 0;  // 8 + N: where the data section starts in the file
};

// Largest header accepted (the reference implementation's limit).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates a whole file's bytes. InvalidInput "<source>: ..." naming the field
// or tensor when: the file is shorter than 8 bytes or than its header; the header is over
// 100 MB, not a JSON object, or has a duplicate key; a tensor's dtype is unknown, its shape
// not an array of integers >= 0, its element count overflows, its data_offsets not two
// integers with begin <= end, or end - begin differs from elements x dtype bytes; the
// tensors overlap or leave a gap (sorted by offset each must begin where the previous
// ended, the first at 0); the last does not end exactly at the end of the file;
// __metadata__ is not an object of strings.
SafetensorsHeader ParseSafetensors(std::span<const std::byte> file, const std::string& source);

// A safetensors file mapped read-only and validated (ParseSafetensors). Tensors are read
// in place: no copy of the file is made.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // The tensor called `name`; InvalidInput naming the file and the tensor when absent.
  const SafetensorsTensor& Find(const std::string& name) const;
  bool Contains(const std::string& name) const;
  // The raw little-endian bytes of `tensor` (one of header().tensors).
  std::span<const std::byte> Bytes(const SafetensorsTensor& tensor) const;
  // Drops `tensor`'s pages from memory once it has been read (MappedFile::Release).
  void Release(const SafetensorsTensor& tensor) const { file_.Release(Bytes(tensor)); }

 private:
  std::string path_;
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t> index_;  // name -> position in header_.tensors
};

// A tensor to write: name, dtype, shape and its raw little-endian bytes.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
};

// The first part of a safetensors file holding `tensors` (in the given order, contiguous)
// and `metadata`: the 8-byte length and the JSON header, padded with spaces to a multiple
// of 8 bytes as the reference writer does. The tensors' bytes follow it in the file.
// InvalidInput when a name repeats or is "__metadata__", or a tensor's bytes do not match
// its dtype and shape.
std::string SafetensorsHeaderBytes(const std::vector<SafetensorsEntry>& tensors,
                                   const std::map<std::string, std::string>& metadata = {});

// Writes a safetensors file atomically (PATH.tmp, then renamed), streaming each tensor's
// bytes, so no second copy of the weights is made. IoError naming the path when a write
// fails (nothing is left behind).
void WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace hydraulis
