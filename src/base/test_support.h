// Helpers shared by the test binaries (header-only; tests link GoogleTest).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis::test_support {

// Runs `fn`, expects InvalidInput, and returns its message ("" and a test failure when it
// throws something else or nothing).
inline std::string InvalidInputMessage(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidInput& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidInput, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InvalidInput, nothing was thrown";
  return "";
}

// The shared Wikipedia document lengths beside the checkout (../shared/data/README.md).
inline std::string SharedLengthsPath() {
  return std::string(HYDRAULIS_SOURCE_DIR) + "/../shared/data/wikipedia-doc-lengths.txt";
}
inline bool HaveSharedLengths() { return std::filesystem::exists(SharedLengthsPath()); }
// The lengths tests draw real batches from: the shared ones, else the bundled 20,000-length
// sample. Figures that hold on the shared distribution only are checked only with it.
inline std::string RealLengthsPath() {
  return HaveSharedLengths()
             ? SharedLengthsPath()
             : std::string(HYDRAULIS_SOURCE_DIR) + "/data/wikipedia-sample-lengths.txt";
}

}  // namespace hydraulis::test_support
