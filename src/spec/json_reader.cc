#include "hydraulis/spec/internal/json_reader.h"

#include <algorithm>
#include <cmath>

#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"

namespace hydraulis {

JsonObjectReader::JsonObjectReader(const nlohmann::json& object, std::string source,
                                   std::string path)
    : object_(object), source_(std::move(source)), path_(std::move(path)) {
  if (!object_.is_object()) {
    throw InvalidInput(source_ + ": " + (path_.empty() ? std::string("document") : path_) +
                       ": expected a JSON object");
  }
}

std::string JsonObjectReader::FieldPath(const std::string& key) const {
  // A key is the user's text: one with control bytes, or a long one, is shown quoted, cut
  // and escaped, so a message stays one bounded line (found by fuzz/profile: a newline).
  const bool plain = key.size() <= 60 && std::all_of(key.begin(), key.end(), [](char c) {
                       const auto u = static_cast<unsigned char>(c);
                       return u >= 0x20 && u != 0x7f;
                     });
  const std::string shown = plain ? key : QuoteForMessage(key);
  return path_.empty() ? shown : path_ + "." + shown;
}

void JsonObjectReader::Fail(const std::string& key, const std::string& message) const {
  throw InvalidInput(source_ + ": " + FieldPath(key) + ": " + message);
}

bool JsonObjectReader::Has(const std::string& key) const { return object_.contains(key); }

const nlohmann::json& JsonObjectReader::Get(const std::string& key) {
  auto it = object_.find(key);
  if (it == object_.end()) Fail(key, "missing required field");
  used_.insert(key);
  return *it;
}

std::int64_t JsonIntegerAt(const nlohmann::json& value, std::int64_t min_value,
                           std::int64_t max_value, const std::string& source,
                           const std::string& path) {
  std::int64_t x = 0;
  std::string message;
  switch (CheckJsonInteger(value, min_value, max_value, &x)) {
    case JsonIntegerCheck::kInRange:
      return x;
    case JsonIntegerCheck::kAboveMax:
      message = "must be <= " + std::to_string(max_value);
      break;
    case JsonIntegerCheck::kBelowMin:
      message = "must be >= " + std::to_string(min_value);
      break;
    case JsonIntegerCheck::kNotAnInteger:
      message = "expected an integer";
      break;
  }
  throw InvalidInput(source + ": " + path + ": " + message + ", got " + JsonForMessage(value));
}

std::int64_t JsonObjectReader::Int(const std::string& key, std::int64_t min_value,
                                   std::int64_t max_value) {
  return JsonIntegerAt(Get(key), min_value, max_value, source_, FieldPath(key));
}

std::int64_t JsonObjectReader::IntOr(const std::string& key, std::int64_t fallback,
                                     std::int64_t min_value, std::int64_t max_value) {
  return Has(key) ? Int(key, min_value, max_value) : fallback;
}

double JsonObjectReader::Number(const std::string& key, double min_value) {
  const auto& v = Get(key);
  if (!v.is_number()) Fail(key, "expected a number, got " + JsonForMessage(v));
  double x = v.get<double>();
  if (!std::isfinite(x) || x < min_value) {
    Fail(key, "must be a finite number >= " + nlohmann::json(min_value).dump() + ", got " +
                  JsonForMessage(v));
  }
  return x;
}

double JsonObjectReader::NumberOr(const std::string& key, double fallback, double min_value) {
  return Has(key) ? Number(key, min_value) : fallback;
}

std::string JsonObjectReader::String(const std::string& key) {
  const auto& v = Get(key);
  if (!v.is_string()) Fail(key, "expected a string, got " + JsonForMessage(v));
  return v.get<std::string>();
}

std::string JsonObjectReader::StringOr(const std::string& key, const std::string& fallback) {
  return Has(key) ? String(key) : fallback;
}

const nlohmann::json& JsonObjectReader::Value(const std::string& key) { return Get(key); }

const nlohmann::json& JsonObjectReader::Array(const std::string& key) {
  const auto& v = Get(key);
  if (!v.is_array()) Fail(key, std::string("expected an array, got ") + v.type_name());
  return v;
}

JsonObjectReader JsonObjectReader::Object(const std::string& key) {
  const auto& v = Get(key);
  if (!v.is_object()) Fail(key, "expected an object");
  return JsonObjectReader(v, source_, FieldPath(key));
}

JsonObjectReader JsonObjectReader::Element(const std::string& key, const nlohmann::json& array,
                                           std::size_t index) const {
  return JsonObjectReader(array.at(index), source_,
                          FieldPath(key) + "[" + std::to_string(index) + "]");
}

void JsonObjectReader::RejectUnknown() const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (!used_.count(it.key())) Fail(it.key(), "unknown field");
  }
}

}  // namespace hydraulis
