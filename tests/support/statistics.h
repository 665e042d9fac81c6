#pragma once
// Statistical expectations shared by tests that count random outcomes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace attnkit::testing {

// |observed - n p| within 5 standard deviations of Binomial(n, p) (+ 1 for small n).
inline void expect_binomial(int64_t observed, int64_t n, double p, const char* what) {
  const double mean = static_cast<double>(n) * p, sd = std::sqrt(static_cast<double>(n) * p * (1 - p));
  EXPECT_LE(std::abs(static_cast<double>(observed) - mean), 5 * sd + 1)
      << what << ": " << observed << " of " << n << ", expected " << mean << " +- " << 5 * sd;
}

}  // namespace attnkit::testing
