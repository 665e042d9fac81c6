#pragma once
// Path view of a self-attention network with skip connections (Dong et al. 2021, Section 3): in
// an L-layer network with H heads per layer, a path chooses in every layer either the skip
// connection or one of the H heads, so there are (1 + H)^L paths and C(L, k)·H^k of them go
// through exactly k attention heads ("length k"). The counts overflow 64-bit integers quickly
// (17^48 ≈ 1.2·10^59), so they are exact unsigned big integers here.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::analysis {

// A non-negative integer of any size (base 2^32 limbs, least significant first). Only what
// path counting needs: +, × small, comparison, decimal text and a double approximation.
class BigCount {
 public:
  BigCount(uint64_t value = 0);
  BigCount& operator+=(const BigCount& other);
  BigCount& multiply(uint32_t factor);
  bool operator==(const BigCount& other) const { return limbs_ == other.limbs_; }
  bool operator!=(const BigCount& other) const { return !(*this == other); }
  std::string to_string() const;  // decimal
  double to_double() const;       // nearest-ish double (relative error ~1e-16)

 private:
  void trim();
  std::vector<uint32_t> limbs_;  // empty = 0
};

// C(n, k) exactly (Pascal's rule, additions only). Throws attnkit::Error for k > n or n < 0.
BigCount binomial(int64_t n, int64_t k);
// base^exponent exactly.
BigCount power(uint32_t base, int64_t exponent);

struct PathLength {
  int64_t length = 0;     // number of attention heads on the path (0 = the pure skip path)
  BigCount count;         // C(L, k)·H^k
  double fraction = 0.0;  // count / (1 + H)^L
};

struct PathDistribution {
  int64_t layers = 0;
  int64_t heads = 0;
  std::vector<PathLength> lengths;  // k = 0..L
  BigCount total;                   // (1 + H)^L, checked equal to the sum of the counts
  double mean_length = 0.0;         // L·H / (1 + H)
};

// Throws attnkit::Error for layers < 0, heads < 1, or if the counts do not sum to (1 + H)^L.
PathDistribution path_length_distribution(int64_t layers, int64_t heads);

}  // namespace attnkit::analysis
