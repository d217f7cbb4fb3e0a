// Whole-file reads and atomic writes.
#pragma once

#include <string>

namespace hydraulis {

// Reads a whole file; InvalidInput naming the path when it cannot be read.
std::string ReadFileText(const std::string& path);

// Writes `text` to `path` atomically (temporary file in the same folder, then rename), so
// a failure never leaves a half-written file. InvalidInput naming the path on failure.
void WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace hydraulis
