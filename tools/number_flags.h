// Checks on numeric flags, so a value the program would misread (NaN, infinity, a
// negative count wrapped to a huge unsigned one) is rejected naming the flag, not used.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace hydraulis::tools {

// A finite number > 0 (replaces CLI::PositiveNumber, whose message prints DBL_MAX).
CLI::Validator PositiveNumber();
// A finite number >= 0.
CLI::Validator NonNegativeNumber();

// Adds to every option of `app` and its subcommands, by the type CLI11 parsed it as: a
// floating-point value must be finite; an unsigned one must not be written negative.
void CheckEveryNumber(CLI::App& app);

// The message for CLI11's conversion failure: an integer out of its flag's range gets the
// flag, the value and the range, like CheckEveryNumber's own messages.
std::string ConversionErrorMessage(const CLI::ConversionError& e);

// The message for an error in the --config file: the file, and the key CLI11 could not
// place named as the user wrote it.
std::string ConfigErrorMessage(const CLI::App& app, const CLI::ConfigError& e);

}  // namespace hydraulis::tools
