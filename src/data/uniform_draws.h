#pragma once
// Uniform draws from std::mt19937_64 that depend only on the engine's standardised output (not on
// a standard library's distributions), so a seed gives the same data on every platform. Internal
// to the data layer (the generators of listops.cpp, synthetic_tasks.cpp, pathfinder.cpp).
#include <cstdint>
#include <random>

namespace attnkit::data::detail {

// Uniform in [0, n) (n >= 1): rejection of the low 2^64 mod n values, so every residue is equally
// likely.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

// Uniform in [0, 1) with 53 random bits.
inline double uniform_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace attnkit::data::detail
