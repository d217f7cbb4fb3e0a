// Whole-file reads and atomic writes.
#pragma once

#include <string>

namespace hydraulis {

// Reads a whole file; InvalidInput naming the path when it cannot be read.
std::string ReadFileText(const std::string& path);

// Writes `text` to `path` atomically (temporary file in the same folder, then rename), so
// a failure never leaves a half-written file. Never replaces what is not a regular file: a
// symbolic link is followed (its target is replaced, the link kept); a character device or
// a FIFO (/dev/null, a pipe) is written into directly, as there is nothing to replace
// atomically; a directory or any other kind of file is InvalidInput. A failed write
// (full disk) is IoError naming the path; nothing is left behind.
void WriteFileAtomically(const std::string& path, const std::string& text);

// Flushes stdout; IoError when anything written to it was lost (closed, full device).
void FlushStdout();

}  // namespace hydraulis
