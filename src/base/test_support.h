// Helpers shared by the test binaries (header-only; tests link GoogleTest).
#pragma once

#include <gtest/gtest.h>

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

}  // namespace hydraulis::test_support
