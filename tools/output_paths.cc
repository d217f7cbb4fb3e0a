#include "output_paths.h"

#include <sys/stat.h>

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

}  // namespace hydraulis::tools
