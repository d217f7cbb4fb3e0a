// Output flags: an empty path is an error, and an output that names one of the command's
// own inputs is refused before anything is read or written.
#pragma once

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <string>

namespace hydraulis::tools {

// A flag as the user spells it and the path given to it ("" when absent).
struct FlagPath {
  std::string flag;
  std::string path;
};

// Rejects an empty value ("-o ''" would otherwise mean standard output), naming the flag.
CLI::Validator NonEmptyPath();

// InvalidInput naming both flags when `output` names the same file as one of `inputs`
// (same device and inode, so links, "./" and other spellings are caught). An output that
// does not exist yet, "-" (standard output) and absent paths are never a match.
void RefuseOutputOverInput(const FlagPath& output, std::initializer_list<FlagPath> inputs);

// InvalidInput naming the flag unless `output.path` can be written: an existing file (not a
// folder; a device or pipe is fine) this process may write, or a new file in an existing
// folder it may write. Checked before a
// job starts ranks, so a log path that cannot be written is one line, not one per rank.
void RequireWritableFile(const FlagPath& output);

}  // namespace hydraulis::tools
