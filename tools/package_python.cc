#include <cstdlib>
#include <string>

#include "commands.h"

namespace hydraulis::tools {

std::string PackagePython() {
  if (const char* python = std::getenv("HYDRAULIS_PYTHON"); python != nullptr && *python) {
    return python;
  }
  return HYDRAULIS_PACKAGE_PYTHON;
}

}  // namespace hydraulis::tools
