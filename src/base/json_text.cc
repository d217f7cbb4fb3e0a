#include "hydraulis/base/internal/json_text.h"

#include <cmath>
#include <set>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

constexpr std::size_t kMessageChars = 200;

// Thrown from the parser's callback (nlohmann lets it propagate), caught below.
struct Rejected {
  std::string message;
};

}  // namespace

nlohmann::json ParseJson(std::string_view text, const std::string& source) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys;  // per open object, its keys so far
  auto check = [&](int depth, Event event, nlohmann::json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= kMaxJsonDepth) {
          throw Rejected{"nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
        }
        if (event == Event::object_start) keys.emplace_back();
        break;
      case Event::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second) {
          throw Rejected{"duplicate key " + QuoteForMessage(parsed.get<std::string>()) +
                         " in one object"};
        }
        break;
      case Event::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), check);
  } catch (const Rejected& r) {
    throw InvalidInput(source + ": invalid JSON: " + r.message);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, or out_of_range for a number beyond a double (1e400). The parser's
    // message may echo a long token ("last read: ..."): bound it.
    std::string what = QuoteForMessage(e.what(), kMessageChars);
    what = what.substr(1);
    const auto close = what.rfind('\'');
    if (close != std::string::npos) what.erase(close, 1);
    throw InvalidInput(source + ": invalid JSON: " + what);
  }
}

std::string JsonForMessage(const nlohmann::json& value) {
  if (value.is_array()) return "an array of " + std::to_string(value.size()) + " element(s)";
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " field(s)";
  const std::string text = value.dump();
  if (text.size() <= 60) return text;
  return text.substr(0, 60) + "...(" + std::to_string(text.size()) + " bytes)";
}

JsonIntegerCheck CheckJsonInteger(const nlohmann::json& value, std::int64_t min_value,
                                  std::int64_t max_value, std::int64_t* out) {
  if (value.is_number_unsigned()) {
    // Any value above INT64_MAX lands here, and no int64 conversion happens before the
    // comparison (max_value < 0 makes every unsigned value too large).
    const std::uint64_t u = value.get<std::uint64_t>();
    if (max_value < 0 || u > static_cast<std::uint64_t>(max_value)) {
      return JsonIntegerCheck::kAboveMax;
    }
    if (min_value > 0 && u < static_cast<std::uint64_t>(min_value)) {
      return JsonIntegerCheck::kBelowMin;
    }
    *out = static_cast<std::int64_t>(u);
    return JsonIntegerCheck::kInRange;
  }
  if (value.is_number_integer()) {
    const std::int64_t i = value.get<std::int64_t>();
    if (i > max_value) return JsonIntegerCheck::kAboveMax;
    if (i < min_value) return JsonIntegerCheck::kBelowMin;
    *out = i;
    return JsonIntegerCheck::kInRange;
  }
  if (!value.is_number_float()) return JsonIntegerCheck::kNotAnInteger;
  // ParseJson rejects numbers beyond a double, so x is finite. long double holds every
  // int64 exactly where it is wider than double (x86-64), so the bounds compare exactly.
  const double x = value.get<double>();
  if (static_cast<long double>(x) > static_cast<long double>(max_value)) {
    return JsonIntegerCheck::kAboveMax;
  }
  if (static_cast<long double>(x) < static_cast<long double>(min_value)) {
    return JsonIntegerCheck::kBelowMin;
  }
  // Past 2^53 a double no longer holds every integer: 1e16 written as a float may not be
  // the integer the user meant.
  constexpr double kExactIntegers = 9e15;
  if (std::floor(x) != x || std::abs(x) >= kExactIntegers) return JsonIntegerCheck::kNotAnInteger;
  *out = static_cast<std::int64_t>(x);
  return JsonIntegerCheck::kInRange;
}

}  // namespace hydraulis
