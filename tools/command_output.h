// Where a command's main output goes: standard output, or a file written atomically.
#pragma once

#include <string>

namespace hydraulis::tools {

// Prints `text` as it is when `path` is "" or "-", else writes it to `path` atomically
// (WriteFileAtomically: a failure never leaves half a file).
void WriteOutput(const std::string& path, const std::string& text);

}  // namespace hydraulis::tools
