// Reading little-endian integers from file bytes.
#pragma once

#include <cstddef>
#include <type_traits>

namespace hydraulis {

// Assembles a little-endian value byte by byte: correct on any host and at any alignment
// (the Megatron index arrays after the 34-byte header are not naturally aligned). Compilers
// turn the loop into one load on little-endian hosts.
template <typename T>
T LoadLittleEndian(const std::byte* p) {
  using U = std::make_unsigned_t<T>;
  U v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    v = static_cast<U>(v | static_cast<U>(std::to_integer<U>(p[i]) << (8 * i)));
  }
  return static_cast<T>(v);  // modular since C++20
}

}  // namespace hydraulis
