#include "attnkit/analysis/path_counts.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace attnkit::analysis {

BigCount::BigCount(uint64_t value) {
  while (value > 0) {
    limbs_.push_back(static_cast<uint32_t>(value & 0xffffffffu));
    value >>= 32;
  }
}

void BigCount::trim() {
  while (!limbs_.empty() && limbs_.back() == 0) limbs_.pop_back();
}

BigCount& BigCount::operator+=(const BigCount& other) {
  if (limbs_.size() < other.limbs_.size()) limbs_.resize(other.limbs_.size(), 0);
  uint64_t carry = 0;
  for (size_t i = 0; i < limbs_.size(); ++i) {
    const uint64_t sum = uint64_t(limbs_[i]) + (i < other.limbs_.size() ? other.limbs_[i] : 0) + carry;
    limbs_[i] = static_cast<uint32_t>(sum);
    carry = sum >> 32;
  }
  if (carry) limbs_.push_back(static_cast<uint32_t>(carry));
  return *this;
}

BigCount& BigCount::multiply(uint32_t factor) {
  uint64_t carry = 0;
  for (auto& limb : limbs_) {
    const uint64_t product = uint64_t(limb) * factor + carry;
    limb = static_cast<uint32_t>(product);
    carry = product >> 32;
  }
  if (carry) limbs_.push_back(static_cast<uint32_t>(carry));
  trim();
  return *this;
}

std::string BigCount::to_string() const {
  if (limbs_.empty()) return "0";
  // Repeated division by 10^9 on a copy.
  std::vector<uint32_t> digits = limbs_;
  std::vector<uint32_t> chunks;  // base 10^9, least significant first
  while (!digits.empty()) {
    uint64_t remainder = 0;
    for (size_t i = digits.size(); i-- > 0;) {
      const uint64_t current = (remainder << 32) | digits[i];
      digits[i] = static_cast<uint32_t>(current / 1000000000u);
      remainder = current % 1000000000u;
    }
    chunks.push_back(static_cast<uint32_t>(remainder));
    while (!digits.empty() && digits.back() == 0) digits.pop_back();
  }
  std::string text = std::to_string(chunks.back());
  for (size_t i = chunks.size() - 1; i-- > 0;) text += fmt::format("{:09d}", chunks[i]);
  return text;
}

double BigCount::to_double() const {
  double value = 0.0;
  for (size_t i = limbs_.size(); i-- > 0;) value = value * 4294967296.0 + limbs_[i];
  return value;
}

BigCount binomial(int64_t n, int64_t k) {
  if (n < 0 || k < 0 || k > n)
    throw Error(fmt::format("binomial: need 0 <= k <= n (got n={}, k={})", n, k));
  std::vector<BigCount> row{BigCount(1)};  // row 0 of Pascal's triangle
  for (int64_t i = 1; i <= n; ++i) {
    std::vector<BigCount> next(static_cast<size_t>(i + 1), BigCount(1));
    for (int64_t j = 1; j < i; ++j) {
      next[j] = row[j - 1];
      next[j] += row[j];
    }
    row = std::move(next);
  }
  return row[static_cast<size_t>(k)];
}

BigCount power(uint32_t base, int64_t exponent) {
  BigCount result(1);
  for (int64_t i = 0; i < exponent; ++i) result.multiply(base);
  return result;
}

PathDistribution path_length_distribution(int64_t layers, int64_t heads) {
  if (layers < 0 || heads < 1 || heads > 1000000)
    throw Error(fmt::format("paths: need layers >= 0 and 1 <= heads <= 10^6 (got layers={}, "
                            "heads={})",
                            layers, heads));
  PathDistribution d;
  d.layers = layers;
  d.heads = heads;
  d.total = power(static_cast<uint32_t>(1 + heads), layers);
  const double total = d.total.to_double();
  BigCount sum(0);
  for (int64_t k = 0; k <= layers; ++k) {
    PathLength p;
    p.length = k;
    p.count = binomial(layers, k);
    for (int64_t i = 0; i < k; ++i) p.count.multiply(static_cast<uint32_t>(heads));
    p.fraction = p.count.to_double() / total;
    sum += p.count;
    d.mean_length += double(k) * p.fraction;
    d.lengths.push_back(std::move(p));
  }
  if (sum != d.total)
    throw Error(fmt::format("paths: the counts sum to {} instead of (1+{})^{} = {}",
                            sum.to_string(), heads, layers, d.total.to_string()));
  return d;
}

}  // namespace attnkit::analysis
