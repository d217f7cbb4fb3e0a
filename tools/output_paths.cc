#include "output_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis::tools {

CLI::Validator NonEmptyPath() {
  return CLI::Validator(
      [](std::string& text) {
        return text.empty() ? std::string("expected a path, got an empty string") : std::string();
      },
      "PATH");
}

void RefuseOutputOverInput(const FlagPath& output, std::initializer_list<FlagPath> inputs) {
  if (output.path.empty() || output.path == "-") return;
  struct stat out {};
  if (::stat(output.path.c_str(), &out) != 0) return;  // not there yet: nothing to overwrite
  for (const FlagPath& input : inputs) {
    if (input.path.empty() || input.path == "-") continue;
    struct stat in {};
    if (::stat(input.path.c_str(), &in) != 0) continue;  // its reader names the problem
    if (in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
      throw InvalidInput(output.flag + " " + QuoteForMessage(output.path) +
                         " is the same file as " + input.flag + " " + QuoteForMessage(input.path) +
                         "; refusing to overwrite an input: write the output elsewhere");
    }
  }
}

void RequireWritableFile(const FlagPath& output) {
  if (output.path.empty()) return;
  const std::string where = output.flag + " " + QuoteForMessage(output.path) + ": ";
  struct stat st {};
  if (::stat(output.path.c_str(), &st) == 0) {
    // Devices and pipes are fine (/dev/stdout, a FIFO a log reader holds): only a folder is not.
    if (S_ISDIR(st.st_mode)) throw InvalidInput(where + "is a folder, not a file");
    if (::access(output.path.c_str(), W_OK) != 0) {
      throw InvalidInput(where + "cannot be written: " + std::strerror(errno));
    }
    return;
  }
  std::string folder = std::filesystem::path(output.path).parent_path().string();
  if (folder.empty()) folder = ".";
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw InvalidInput(where + "its folder " + QuoteForMessage(folder) + " does not exist");
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw InvalidInput(where + "its folder " + QuoteForMessage(folder) +
                       " cannot be written: " + std::strerror(errno));
  }
}

}  // namespace hydraulis::tools
