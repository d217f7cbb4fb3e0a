// Wall-clock intervals in milliseconds, the unit every timing the project logs uses.
#pragma once

#include <chrono>

namespace hydraulis {

// Milliseconds from `start` to now, on the monotonic clock.
inline double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Adds the milliseconds from its construction to its destruction to `total`, so every way
// out of a scope is counted.
class ElapsedInto {
 public:
  explicit ElapsedInto(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~ElapsedInto() { total_ += MsSince(start_); }
  ElapsedInto(const ElapsedInto&) = delete;
  ElapsedInto& operator=(const ElapsedInto&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hydraulis
