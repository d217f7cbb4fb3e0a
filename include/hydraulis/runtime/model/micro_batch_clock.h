// The time each micro-batch's forward and backward take on a stage, what the calibration of
// the cost model fits (assign/step_calibration.h): the host clock on the CPU, where the host
// runs the work; CUDA events on a GPU, where the host only queues it and its clock would
// measure the queuing.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "hydraulis/runtime/model/compute.h"

namespace hydraulis {

class MicroBatchClock {
 public:
  // A clock for `micro_batches` micro-batches on `device`'s current stream.
  MicroBatchClock(DeviceKind device, int micro_batches);
  ~MicroBatchClock();
  MicroBatchClock(const MicroBatchClock&) = delete;
  MicroBatchClock& operator=(const MicroBatchClock&) = delete;

  // Around each forward or backward of a micro-batch: Start, then Stop adding the span to
  // that micro-batch's time. Spans do not nest.
  void Start();
  void Stop(int micro_batch);

  // Each micro-batch's total (ms). On a GPU this waits for the recorded events (the work
  // they close must have been queued; the step's end has it done anyway).
  std::vector<double> Read();

 private:
  DeviceKind device_;
  std::vector<double> ms_;
  std::chrono::steady_clock::time_point started_;
  struct Events;  // CUDA events, when built with CUDA
  std::unique_ptr<Events> events_;
};

}  // namespace hydraulis
