// A hash of a sequence of integers for in-memory tables (not stable across versions, never
// stored): splitmix64's finaliser over each word, chained from `seed`.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace hydraulis {

template <std::integral T>
std::size_t HashWords(std::span<const T> words, std::uint64_t seed = 0x9e3779b97f4a7c15ULL) {
  std::uint64_t h = seed;
  for (const T x : words) {
    std::uint64_t z = h ^ static_cast<std::uint64_t>(x);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    h = z ^ (z >> 31);
  }
  return static_cast<std::size_t>(h);
}

}  // namespace hydraulis
