#include "number_flags.h"

#include <cmath>
#include <string>

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

void CheckEveryNumber(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type == "FLOAT") {
      opt->check(CLI::Validator(
          [](std::string& text) {
            return CheckNumber(
                text, [](double) { return true; }, "");
          },
          ""));
    } else if (type == "UINT") {
      opt->check(CLI::Validator(
          [](std::string& text) {
            return text.find('-') == std::string::npos
                       ? std::string()
                       : "expected a number >= 0, got " + QuoteForMessage(text);
          },
          ""));
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) CheckEveryNumber(*sub);
}

}  // namespace hydraulis::tools
