// Seeded random numbers whose sequences are identical on every platform and standard
// library: std::uniform_int_distribution and std::shuffle are implementation-defined, so
// plans that must be byte-identical on every rank use this instead.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace hydraulis {

// SplitMix64-seeded xoshiro256** generator.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);

  // Next 64 uniformly random bits.
  std::uint64_t Next();

  // Uniform integer in [0, bound); bound must be > 0. Unbiased (rejection sampling).
  std::uint64_t Below(std::uint64_t bound);

  // Uniform double in [0, 1).
  double Uniform();

  // Fisher-Yates shuffle, the same permutation everywhere for the same seed.
  template <typename T>
  void Shuffle(std::span<T> items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      std::size_t j = static_cast<std::size_t>(Below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  std::uint64_t state_[4];
};

}  // namespace hydraulis
