// The shared `main` of the bench programs: hydraulis errors become one line and status 2.
#pragma once

#include <fmt/core.h>

#include "hydraulis/base/error.h"

namespace hydraulis {

template <typename Run>
int BenchMain(const char* name, Run run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    fmt::print(stderr, "{}: error: {}\n", name, e.what());
    return 2;
  }
}

}  // namespace hydraulis
