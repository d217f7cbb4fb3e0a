#include "timing_environment.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/runtime/launch/launcher.h"

namespace hydraulis::tools {
namespace {

// What the profile is measured under, set before the process starts because OpenBLAS and
// glibc read them when they load: one BLAS thread per rank (tp ranks share the cores), and a
// malloc that keeps freed memory (no mmap of its own per large tensor, no returning of the
// heap to the kernel), as a GPU's caching allocator keeps device memory. Without the latter
// every large tensor is page-faulted afresh and the profile measures the kernel rather than
// the engine (docs/runtime.md, "Profiler", has the figures). Training should run under the
// same settings.
const std::vector<EnvironmentSetting> kTimingEnvironment = {
    {"OMP_NUM_THREADS", "1"},
    {"OPENBLAS_NUM_THREADS", "1"},
    {"GLIBC_TUNABLES", kAllocatorTunables},
};

}  // namespace

bool HasTimingEnvironment() {
  for (const EnvironmentSetting& s : kTimingEnvironment) {
    const char* current = std::getenv(s.name);
    if (current == nullptr || std::string(current) != s.value) return false;
  }
  return true;
}

void SetTimingEnvironment() {
  for (const EnvironmentSetting& e : kTimingEnvironment) setenv(e.name, e.value, 1);
}

void RestartWithTimingEnvironment() {
  RestartSelfWith(kTimingEnvironment, CommandLine());
  fmt::print(stderr, "hydraulis: warning: could not restart with {}=1 and {}: {}\n",
             kTimingEnvironment[0].name, kTimingEnvironment[2].name, std::strerror(errno));
}

}  // namespace hydraulis::tools
