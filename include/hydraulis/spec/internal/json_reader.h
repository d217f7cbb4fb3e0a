// Strict reading of JSON objects for spec files: every field is looked up by name, values
// are range-checked, and fields nobody asked for are reported as unknown. Errors name the
// source and the field path ("c.json: strategies[2].pipelines[0].tp").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>

namespace hydraulis {

// The integer `value` found at field path `path` of `source`, in [min_value, max_value];
// InvalidInput "<source>: <path>: must be <= ..., got ..." otherwise. For values that are
// not an object's field (array elements); JsonObjectReader::Int is this for a key.
std::int64_t JsonIntegerAt(const nlohmann::json& value, std::int64_t min_value,
                           std::int64_t max_value, const std::string& source,
                           const std::string& path);

class JsonObjectReader {
 public:
  static constexpr std::int64_t kIntMax = 2147483647;

  // `path` is the field path of `object` inside the document ("" for the root).
  JsonObjectReader(const nlohmann::json& object, std::string source, std::string path);

  bool Has(const std::string& key) const;
  // Integers are range-checked against [min_value, max_value] (default: fits an int).
  std::int64_t Int(const std::string& key, std::int64_t min_value,
                   std::int64_t max_value = kIntMax);
  std::int64_t IntOr(const std::string& key, std::int64_t fallback, std::int64_t min_value,
                     std::int64_t max_value = kIntMax);
  double Number(const std::string& key, double min_value);
  double NumberOr(const std::string& key, double fallback, double min_value);
  std::string String(const std::string& key);
  std::string StringOr(const std::string& key, const std::string& fallback);
  // The raw value, marked as used; throws when missing.
  const nlohmann::json& Value(const std::string& key);
  const nlohmann::json& Array(const std::string& key);
  JsonObjectReader Object(const std::string& key);
  // Reader for element `index` of an array value obtained from Array(key).
  JsonObjectReader Element(const std::string& key, const nlohmann::json& array,
                           std::size_t index) const;

  // Throws for the first field that was never read.
  void RejectUnknown() const;

  // Field path of `key` in this object, for messages.
  std::string FieldPath(const std::string& key) const;
  [[noreturn]] void Fail(const std::string& key, const std::string& message) const;
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& Get(const std::string& key);

  const nlohmann::json& object_;
  std::string source_;
  std::string path_;
  std::set<std::string> used_;
};

}  // namespace hydraulis
