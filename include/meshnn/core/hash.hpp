// A small, fast, well-mixed 64-bit hash (splitmix64's finaliser): seeded synthetic values that
// every rank computes identically, element by element, whatever order they are produced in.
#pragma once

#include <cstdint>

namespace meshnn {

constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace meshnn
