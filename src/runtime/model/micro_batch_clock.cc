#include "hydraulis/runtime/model/micro_batch_clock.h"

#ifdef HYDRAULIS_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#endif

#include "hydraulis/base/error.h"

namespace hydraulis {

struct MicroBatchClock::Events {
#ifdef HYDRAULIS_WITH_CUDA
  // (micro-batch, start, stop) per span, timed events on the current stream.
  struct Span {
    int micro_batch = 0;
    std::unique_ptr<at::cuda::CUDAEvent> start, stop;
  };
  std::vector<Span> spans;
#endif
};

MicroBatchClock::MicroBatchClock(DeviceKind device, int micro_batches)
    : device_(device), ms_(static_cast<std::size_t>(micro_batches), 0.0) {
  if (device_ == DeviceKind::kCuda) {
#ifdef HYDRAULIS_WITH_CUDA
    events_ = std::make_unique<Events>();
#else
    throw InvalidInput("device cuda: this hydraulis was built against a PyTorch without CUDA");
#endif
  }
}

MicroBatchClock::~MicroBatchClock() = default;

void MicroBatchClock::Start() {
#ifdef HYDRAULIS_WITH_CUDA
  if (events_) {
    // cudaEventDefault: timing on (CUDAEvent's default turns it off).
    Events::Span span;
    span.start = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    span.start->record();
    events_->spans.push_back(std::move(span));
    return;
  }
#endif
  started_ = std::chrono::steady_clock::now();
}

void MicroBatchClock::Stop(int micro_batch) {
  if (micro_batch < 0 || static_cast<std::size_t>(micro_batch) >= ms_.size()) {
    throw InternalError("MicroBatchClock: micro-batch " + std::to_string(micro_batch) + " of " +
                        std::to_string(ms_.size()));
  }
#ifdef HYDRAULIS_WITH_CUDA
  if (events_) {
    Events::Span& span = events_->spans.back();
    span.micro_batch = micro_batch;
    span.stop = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    span.stop->record();
    return;
  }
#endif
  ms_[static_cast<std::size_t>(micro_batch)] +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
          .count();
}

std::vector<double> MicroBatchClock::Read() {
#ifdef HYDRAULIS_WITH_CUDA
  if (events_) {
    for (Events::Span& span : events_->spans) {
      if (!span.stop) throw InternalError("MicroBatchClock: a span was started, never stopped");
      span.stop->synchronize();
      ms_[static_cast<std::size_t>(span.micro_batch)] += span.start->elapsed_time(*span.stop);
    }
    events_->spans.clear();
  }
#endif
  std::vector<double> out = ms_;
  std::fill(ms_.begin(), ms_.end(), 0.0);
  return out;
}

}  // namespace hydraulis
