#include <gtest/gtest.h>

namespace hydraulis {
namespace {
TEST(AssignTest, Placeholder) {}
}  // namespace
}  // namespace hydraulis
