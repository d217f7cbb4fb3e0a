#include "command_output.h"

#include <fmt/core.h>

#include "hydraulis/base/file_io.h"

namespace hydraulis::tools {

void WriteOutput(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    fmt::print("{}", text);
  } else {
    WriteFileAtomically(path, text);
  }
}

}  // namespace hydraulis::tools
