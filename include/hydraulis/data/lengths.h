// Document-length sources: one integer per line, or a JSON array of integers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hydraulis {

// Parses lengths from text. A text whose first non-blank character is '[' is a JSON array;
// otherwise one integer per line (blank lines and lines starting with '#' are skipped).
// Every length must be an integer >= 1; InvalidInput names `source` and the line or index.
std::vector<std::int64_t> ParseLengths(const std::string& text, const std::string& source);

// Reads lengths from a file, or from standard input when path is "-": LoadLengths with
// default options (the format chosen by extension, so a .idx or .jsonl works too).
std::vector<std::int64_t> ReadLengths(const std::string& path);

}  // namespace hydraulis
