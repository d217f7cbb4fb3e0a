#include <gtest/gtest.h>
namespace hydraulis {
namespace {
TEST(SpecTest, Placeholder) {}
}  // namespace
}  // namespace hydraulis
