// The entry point of distributed_test: the tests, or one of the Gloo ranks they start.
// The binary launches itself: with `--dp-worker SCENARIO OUTFILE` or `--trainer-worker
// SCENARIO OUTFILE` it is one rank (rendezvous from RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, as under torchrun), otherwise it runs the tests, which start the ranks, wait
// for them with a deadline (a hang fails the test instead of blocking ctest) and compare what
// they wrote with one process training on the same global batches. Processes are spawned
// fresh rather than forked: forking a process that has started libtorch's and OpenMP's
// threads is not safe.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <string>

#include "runtime/testing/rank_harness.h"
#include "runtime/testing/training_equivalence.h"

int main(int argc, char** argv) {
  hydraulis::test_support::RestartWithOneThread(argv);
  if (argc == 4 && std::string(argv[1]) == "--dp-worker") {
    return hydraulis::test_support::DpWorkerMain(argv[2], argv[3]);
  }
  if (argc == 4 && std::string(argv[1]) == "--trainer-worker") {
    return hydraulis::test_support::TrainerWorkerMain(argv[2], argv[3]);
  }
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
