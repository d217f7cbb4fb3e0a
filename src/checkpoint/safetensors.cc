#include "hydraulis/checkpoint/safetensors.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/base/little_endian.h"

namespace hydraulis {
namespace {

struct DTypeInfo {
  SafetensorsDType dtype;
  std::string_view name;
  std::size_t bytes;
};

constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {SafetensorsDType::kBool, "BOOL", 1},
    {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},
    {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},
    {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},
    {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
    {SafetensorsDType::kF64, "F64", 8},
}};

const DTypeInfo& Info(SafetensorsDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  throw InternalError("unknown SafetensorsDType");
}

// Elements x bytes per element into `bytes`; false when it overflows 64 bits.
bool ByteSize(const std::vector<std::int64_t>& shape, std::size_t element_bytes,
              std::uint64_t& bytes) {
  std::uint64_t n = element_bytes;
  for (std::int64_t d : shape) {
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > std::numeric_limits<std::uint64_t>::max() / u) return false;
    n *= u;
  }
  bytes = n;
  return true;
}

std::string ShapeText(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + "]";
}

// Parsing a file, phase by phase (ParseSafetensors): the length prefix and the header's
// JSON, the __metadata__ entry, each tensor's entry, then the tensors' layout in the data.

// The header's JSON object; `header_bytes` receives its length from the 8-byte prefix.
nlohmann::json ReadHeaderJson(std::span<const std::byte> file, const std::string& source,
                              std::uint64_t& header_bytes) {
  if (file.size() < 8) {
    throw InvalidInput(source + ": " + std::to_string(file.size()) +
                       " bytes, shorter than the 8-byte header length of a safetensors file");
  }
  header_bytes = LoadLittleEndian<std::uint64_t>(file.data());
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    throw InvalidInput(source + ": header length " + std::to_string(header_bytes) +
                       " bytes is over the 100 MB limit (not a safetensors file?)");
  }
  if (header_bytes > file.size() - 8) {
    throw InvalidInput(source + ": header length " + std::to_string(header_bytes) +
                       " bytes runs past the end of the file (" + std::to_string(file.size()) +
                       " bytes): truncated?");
  }
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_bytes);
  nlohmann::json j = ParseJson(text, source + ": header");
  if (!j.is_object()) {
    throw InvalidInput(source + ": header: expected a JSON object, got " + JsonForMessage(j));
  }
  return j;
}

// The __metadata__ entry: an object of strings.
void ReadMetadata(const nlohmann::json& value, const std::string& source,
                  std::map<std::string, std::string>& metadata) {
  if (!value.is_object()) {
    throw InvalidInput(source + ": __metadata__: expected an object of strings");
  }
  for (const auto& [key, text_value] : value.items()) {
    if (!text_value.is_string()) {
      throw InvalidInput(source + ": __metadata__: " + QuoteForMessage(key) +
                         ": expected a string, got " + JsonForMessage(text_value));
    }
    metadata.emplace(key, text_value.get<std::string>());
  }
}

const DTypeInfo& ReadDType(const nlohmann::json& value, const std::string& where) {
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    throw InvalidInput(where + "dtype: missing or not a string");
  }
  const auto info = std::find_if(kDTypes.begin(), kDTypes.end(), [&](const DTypeInfo& i) {
    return i.name == dtype->get<std::string>();
  });
  if (info == kDTypes.end()) {
    throw InvalidInput(where + "dtype: " + QuoteForMessage(dtype->get<std::string>()) +
                       " is not a dtype this reader knows (BOOL, U8, I8, F8_E5M2, F8_E4M3, "
                       "I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64)");
  }
  return *info;
}

std::vector<std::int64_t> ReadShape(const nlohmann::json& value, const std::string& where) {
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    throw InvalidInput(where + "shape: missing or not an array");
  }
  std::vector<std::int64_t> dims;
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned() ||
        d.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw InvalidInput(where + "shape: expected integers >= 0, got " + JsonForMessage(d));
    }
    dims.push_back(d.get<std::int64_t>());
  }
  return dims;
}

// Reads data_offsets into `t` and checks they span exactly the bytes its dtype and shape
// need.
void ReadDataOffsets(const nlohmann::json& value, const DTypeInfo& info, const std::string& where,
                     SafetensorsTensor& t) {
  std::uint64_t expected = 0;
  if (!ByteSize(t.shape, info.bytes, expected) ||
      expected > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw InvalidInput(where + "shape " + ShapeText(t.shape) + ": too many elements");
  }
  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    throw InvalidInput(where + "data_offsets: expected [begin, end], two integers >= 0");
  }
  t.begin = (*offsets)[0].get<std::uint64_t>();
  t.end = (*offsets)[1].get<std::uint64_t>();
  if (t.begin > t.end) {
    throw InvalidInput(where + "data_offsets: begin " + std::to_string(t.begin) + " is after end " +
                       std::to_string(t.end));
  }
  if (t.end - t.begin != expected) {
    throw InvalidInput(where + "data_offsets span " + std::to_string(t.end - t.begin) +
                       " bytes, but " + std::string(info.name) + " of shape " + ShapeText(t.shape) +
                       " needs " + std::to_string(expected));
  }
}

// One tensor's entry; `where` ("<source>: tensor <name>: ") prefixes every message.
SafetensorsTensor ReadTensor(const std::string& name, const nlohmann::json& value,
                             const std::string& where) {
  if (!value.is_object()) {
    throw InvalidInput(where + "expected an object with dtype, shape and data_offsets");
  }
  for (const auto& [key, unused] : value.items()) {
    (void)unused;
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      throw InvalidInput(where + "unknown field " + QuoteForMessage(key));
    }
  }
  SafetensorsTensor t;
  t.name = name;
  const DTypeInfo& info = ReadDType(value, where);
  t.dtype = info.dtype;
  t.shape = ReadShape(value, where);
  ReadDataOffsets(value, info, where, t);
  return t;
}

// Sorts the tensors by offset and checks they tile the `data_bytes` of data exactly.
void SortAndCheckLayout(std::vector<SafetensorsTensor>& tensors, std::uint64_t data_bytes,
                        const std::string& source) {
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  std::uint64_t at = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.begin != at) {
      throw InvalidInput(source + ": tensor " + QuoteForMessage(t.name) + ": data_offsets begin " +
                         std::to_string(t.begin) + ", but the previous tensor ends at " +
                         std::to_string(at) + (t.begin < at ? " (overlap)" : " (gap)"));
    }
    at = t.end;
  }
  if (at != data_bytes) {
    throw InvalidInput(source + ": the tensors end at byte " + std::to_string(at) +
                       " of the data, but the file holds " + std::to_string(data_bytes) +
                       " data bytes" + (at > data_bytes ? " (truncated)" : " (trailing bytes)"));
  }
}

}  // namespace

std::string_view SafetensorsDTypeName(SafetensorsDType dtype) { return Info(dtype).name; }
std::size_t SafetensorsDTypeBytes(SafetensorsDType dtype) { return Info(dtype).bytes; }

std::int64_t SafetensorsTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader ParseSafetensors(std::span<const std::byte> file, const std::string& source) {
  std::uint64_t header_bytes = 0;
  const nlohmann::json j = ReadHeaderJson(file, source, header_bytes);
  SafetensorsHeader header;
  header.data_offset = 8 + header_bytes;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      ReadMetadata(value, source, header.metadata);
    } else {
      header.tensors.push_back(
          ReadTensor(name, value, source + ": tensor " + QuoteForMessage(name) + ": "));
    }
  }
  SortAndCheckLayout(header.tensors, file.size() - header.data_offset, source);
  return header;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(path), header_(ParseSafetensors(file_.bytes(), path)) {
  for (std::size_t i = 0; i < header_.tensors.size(); ++i)
    index_.emplace(header_.tensors[i].name, i);
}

bool SafetensorsFile::Contains(const std::string& name) const { return index_.contains(name); }

const SafetensorsTensor& SafetensorsFile::Find(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    throw InvalidInput(path_ + ": no tensor " + QuoteForMessage(name));
  }
  return header_.tensors[it->second];
}

std::span<const std::byte> SafetensorsFile::Bytes(const SafetensorsTensor& tensor) const {
  return file_.bytes().subspan(header_.data_offset + tensor.begin, tensor.end - tensor.begin);
}

std::string SafetensorsHeaderBytes(const std::vector<SafetensorsEntry>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j;
  if (!metadata.empty()) j["__metadata__"] = metadata;
  std::set<std::string> names;
  std::uint64_t at = 0;
  for (const SafetensorsEntry& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      throw InvalidInput("safetensors: tensor name " + QuoteForMessage(t.name) +
                         " is reserved or repeated");
    }
    std::uint64_t bytes = 0;
    if (!ByteSize(t.shape, SafetensorsDTypeBytes(t.dtype), bytes) || bytes != t.bytes.size()) {
      throw InvalidInput("safetensors: tensor " + QuoteForMessage(t.name) + ": " +
                         std::to_string(t.bytes.size()) + " bytes do not hold " +
                         std::string(SafetensorsDTypeName(t.dtype)) + " of shape " +
                         ShapeText(t.shape));
    }
    j[t.name] = {{"dtype", SafetensorsDTypeName(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  }
  return out + text;
}

void WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string header = SafetensorsHeaderBytes(tensors, metadata);
  const std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (out == nullptr) throw IoError(tmp + ": cannot create: " + std::strerror(errno));
  errno = 0;
  bool ok = std::fwrite(header.data(), 1, header.size(), out) == header.size();
  for (const SafetensorsEntry& t : tensors) {
    // An empty tensor's span may have no storage (a null pointer fwrite must not see).
    if (t.bytes.empty()) continue;
    ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), out) == t.bytes.size();
  }
  const int write_errno = errno;
  ok = std::fflush(out) == 0 && ok;
  ok = std::fclose(out) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = write_errno != 0 ? write_errno : errno;
    std::remove(tmp.c_str());
    throw IoError(path + ": write failed: " + std::strerror(e));
  }
}

}  // namespace hydraulis
