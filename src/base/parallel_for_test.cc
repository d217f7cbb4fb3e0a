// ParallelFor: every index runs exactly once on any thread count, and a job's exception
// reaches the caller after the threads stop.
#include "hydraulis/base/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace hydraulis {
namespace {

TEST(ParallelForTest, EveryIndexRunsOnceOnAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    for (int count : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> runs(static_cast<std::size_t>(count));
      ParallelFor(count, threads, [&](int k) { ++runs[static_cast<std::size_t>(k)]; });
      for (const auto& r : runs) EXPECT_EQ(r.load(), 1) << threads << " threads, " << count;
    }
  }
}

TEST(ParallelForTest, OneThreadRunsInOrderOnTheCaller) {
  std::vector<int> order;
  ParallelFor(5, 1, [&](int k) { order.push_back(k); });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(ParallelForTest, AJobsExceptionIsRethrownAfterTheThreadsStop) {
  for (int threads : {1, 3}) {
    std::atomic<int> ran{0};
    EXPECT_THROW(ParallelFor(50, threads,
                             [&](int k) {
                               ++ran;
                               if (k == 10) throw std::invalid_argument("job 10");
                             }),
                 std::invalid_argument);
    EXPECT_GE(ran.load(), 11);
  }
}

TEST(ParallelForTest, ZeroThreadsMeansTheHardwareThreads) {
  EXPECT_GE(ResolveThreads(0), 1);
  EXPECT_EQ(ResolveThreads(3), 3);
}

}  // namespace
}  // namespace hydraulis
