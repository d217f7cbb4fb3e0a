// The dataset-reading flags every subcommand that takes lengths shares (--format,
// --length-field, --text-field, --tokenizer, --skip-empty), so they read datasets alike.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "hydraulis/data/length_source.h"

namespace hydraulis::tools {

struct LengthFlags {
  LengthSourceSpec spec;

  // Registers the flags on `cmd`; `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
  // The source options they describe; InvalidInput naming a bad --format or --tokenizer.
  LengthSourceOptions ToOptions() const;
};

}  // namespace hydraulis::tools
