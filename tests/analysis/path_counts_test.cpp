// Path view of Dong et al.: C(L,k)·H^k paths of length k, summing to (1+H)^L, exactly.
#include "attnkit/analysis/path_counts.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using attnkit::analysis::BigCount;
using attnkit::analysis::binomial;
using attnkit::analysis::path_length_distribution;
using attnkit::analysis::power;
using attnkit::testing::error_of;

// C(n, k) by the multiplicative formula in 64 bits (exact for the small n used here).
uint64_t small_binomial(uint64_t n, uint64_t k) {
  uint64_t c = 1;
  for (uint64_t i = 1; i <= k; ++i) c = c * (n - k + i) / i;
  return c;
}

TEST(PathCounts, SmallNetworksMatchTheFormulaAndSum) {
  for (int64_t L : {0, 1, 2, 5, 12}) {
    for (int64_t H : {1, 2, 8, 12}) {
      const auto d = path_length_distribution(L, H);
      ASSERT_EQ(d.lengths.size(), size_t(L + 1));
      uint64_t total = 1;
      for (int64_t i = 0; i < L; ++i) total *= uint64_t(1 + H);
      EXPECT_EQ(d.total.to_string(), std::to_string(total));
      uint64_t sum = 0;
      double fraction_sum = 0, mean = 0;
      for (const auto& p : d.lengths) {
        uint64_t expected = small_binomial(uint64_t(L), uint64_t(p.length));
        for (int64_t i = 0; i < p.length; ++i) expected *= uint64_t(H);
        EXPECT_EQ(p.count.to_string(), std::to_string(expected)) << "L=" << L << " H=" << H << " k=" << p.length;
        sum += expected;
        fraction_sum += p.fraction;
        mean += double(p.length) * p.fraction;
      }
      EXPECT_EQ(sum, total);
      EXPECT_NEAR(fraction_sum, 1.0, 1e-12);
      // Binomial(L, H/(1+H)) mean.
      EXPECT_NEAR(d.mean_length, double(L * H) / double(1 + H), 1e-9);
    }
  }
}

TEST(PathCounts, DeepWideNetworkIsExactBeyond64Bits) {
  const auto d = path_length_distribution(48, 16);
  // Reference values from Python's exact integers: 17**48 and comb(48, 24) * 16**24.
  EXPECT_EQ(d.total.to_string(), "115225400457255426923013053222916919834651165519677685328641");
  EXPECT_EQ(d.lengths[24].count.to_string(), "2554918385300236009268549683636917082521600");
  EXPECT_EQ(d.lengths[0].count.to_string(), "1");
  EXPECT_EQ(d.lengths[48].count, power(16, 48));
  // The most common length of Binomial(48, 16/17): floor(49·16/17) = 46.
  size_t mode = 0;
  for (size_t k = 0; k < d.lengths.size(); ++k)
    if (d.lengths[k].fraction > d.lengths[mode].fraction) mode = k;
  EXPECT_EQ(mode, 46u);
  EXPECT_NEAR(d.total.to_double(), 1.1522540045725543e59, 1e45);
}

TEST(PathCounts, BigCountArithmetic) {
  BigCount a(0xffffffffffffffffULL);
  a += BigCount(1);
  EXPECT_EQ(a.to_string(), "18446744073709551616");
  a.multiply(1000000000u);
  EXPECT_EQ(a.to_string(), "18446744073709551616000000000");
  EXPECT_EQ(BigCount(0).to_string(), "0");
  EXPECT_EQ(binomial(60, 30).to_string(), "118264581564861424");
  EXPECT_EQ(binomial(100, 50).to_string(), "100891344545564193334812497256");
}

TEST(PathCounts, BadArgumentsAreErrors) {
  EXPECT_NE(error_of([] { binomial(3, 4); }).find("0 <= k <= n"), std::string::npos);
  EXPECT_NE(error_of([] { path_length_distribution(4, 0); }).find("heads"), std::string::npos);
  EXPECT_NE(error_of([] { path_length_distribution(-1, 2); }).find("layers"), std::string::npos);
}

}  // namespace
