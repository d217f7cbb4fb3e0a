#include "number_flags.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "hydraulis/base/error.h"

namespace hydraulis::tools {
namespace {

// The error for `text`, or "" when it is a finite number passing `ok`.
template <typename Ok>
std::string CheckNumber(const std::string& text, const Ok& ok, const char* expected) {
  double value = 0;
  if (!CLI::detail::lexical_cast(text, value)) {
    return std::string("expected a number, got ") + QuoteForMessage(text);
  }
  if (!std::isfinite(value) || !ok(value)) {
    return std::string("expected a finite number") + (*expected != '\0' ? " " : "") + expected +
           ", got " + QuoteForMessage(text);
  }
  return {};
}

}  // namespace

CLI::Validator PositiveNumber() {
  return CLI::Validator(
      [](std::string& text) {
        return CheckNumber(
            text, [](double v) { return v > 0; }, "> 0");
      },
      "POSITIVE");
}

CLI::Validator NonNegativeNumber() {
  return CLI::Validator(
      [](std::string& text) {
        return CheckNumber(
            text, [](double v) { return v >= 0; }, ">= 0");
      },
      "NONNEGATIVE");
}

namespace {

// An integer flag's text: not empty, all of it an integer in range of the option's type
// (CLI11 would otherwise read "" as 0 and saturate an overflow to the type's maximum).
template <typename Int>
std::string CheckInteger(const std::string& text) {
  Int value{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (first != last && *first == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != last) {
    return "expected an integer" + std::string(std::is_signed_v<Int> ? "" : " >= 0") + ", got " +
           QuoteForMessage(text);
  }
  if (ec == std::errc::result_out_of_range) {
    return "out of range: " + QuoteForMessage(text) + ", give an integer from " +
           std::to_string(std::numeric_limits<Int>::min()) + " to " +
           std::to_string(std::numeric_limits<Int>::max());
  }
  return {};
}

}  // namespace

void CheckEveryNumber(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    // CLI11 appends validators' names ("INT:POSITIVE"): the parsed type comes first.
    const std::string full_type = opt->get_type_name();
    const std::string type = full_type.substr(0, full_type.find(':'));
    if (type == "FLOAT") {
      opt->check(CLI::Validator(
          [](std::string& text) {
            return CheckNumber(
                text, [](double) { return true; }, "");
          },
          ""));
    } else if (type == "INT") {
      opt->check(
          CLI::Validator([](std::string& text) { return CheckInteger<std::int64_t>(text); }, ""));
    } else if (type == "UINT") {
      opt->check(CLI::Validator(
          [](std::string& text) {
            return text.find('-') != std::string::npos
                       ? "expected an integer >= 0, got " + QuoteForMessage(text)
                       : CheckInteger<std::uint64_t>(text);
          },
          ""));
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) CheckEveryNumber(*sub);
}

std::string ConversionErrorMessage(const CLI::ConversionError& e) {
  // CLI11 says "Could not convert: NAME = VALUE". Past CheckEveryNumber, an integer that
  // fails to convert is out of range of a 32-bit int flag (no flag is narrower).
  const std::string what = e.what();
  const std::string prefix = "Could not convert: ";
  const std::size_t equals = what.find(" = ");
  if (what.rfind(prefix, 0) != 0 || equals == std::string::npos) return what;
  const std::string value = what.substr(equals + 3);
  const std::string as_int = CheckInteger<int>(value);
  if (!CheckInteger<std::int64_t>(value).empty() || as_int.empty()) return what;
  return what.substr(prefix.size(), equals - prefix.size()) + ": " + as_int;
}

std::string ConfigErrorMessage(const CLI::App& app, const CLI::ConfigError& e) {
  std::string file;
  if (const CLI::Option* config = app.get_config_ptr(); config != nullptr && config->count() > 0) {
    file = config->as<std::string>();
  }
  std::string what = e.what();
  const std::string unknown = "INI was not able to parse ";
  if (what.rfind(unknown, 0) == 0) {
    what = "unknown key " + QuoteForMessage(what.substr(unknown.size())) +
           " (keys are a command's flags without --, under [train])";
  }
  return "--config " + QuoteForMessage(file) + ": " + what;
}

}  // namespace hydraulis::tools
