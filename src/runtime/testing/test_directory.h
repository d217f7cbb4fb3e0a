// A fresh scratch directory for the running test (header-only), removed with it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace hydraulis::test_support {

class TestDirectory {
 public:
  // TempDir()/hydraulis_<suite>_<test>_<pid>, empty.
  TestDirectory() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = ::testing::TempDir() + "/hydraulis_" + test->test_suite_name() + "_" + test->name() +
            "_" + std::to_string(getpid());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TestDirectory(const TestDirectory&) = delete;
  TestDirectory& operator=(const TestDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace hydraulis::test_support
