// The flash kernels' row of scores (src/ops/cpu/flash_attention_kernel.h, private to the library;
// exported by libattnkit): the blocked copies (16 keys at a time for AVX-512, 4 for AVX2) give the
// same bits as the key-at-a-time loop of the same copy, for every number of keys around the block
// sizes and head sizes with and without blocks, and match float64 dot products.
// scripts/test_isa.sh runs it under every instruction-set copy.
#include "../../src/ops/cpu/flash_attention_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

TEST(FlashRowScores, BlocksGiveTheBitsOfOneKeyAtATime) {
  torch::manual_seed(3);
  for (int64_t d : {16, 32, 64, 80, 128, 24, 7}) {
    for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 19, 40, 63}) {
      const int64_t ldk = d + 3;  // rows not adjacent, as a head inside [n, H·d]
      const auto k = torch::randn({n, ldk});
      const auto q = torch::randn({d});
      std::vector<float> blocked(n), per_key(n);
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      attnkit::ops::cpu::attention_row_scores(q.data_ptr<float>(), k.data_ptr<float>(), ldk, n, d, scale,
                                              blocked.data());
      attnkit::ops::cpu::attention_row_scores_per_key(q.data_ptr<float>(), k.data_ptr<float>(), ldk, n,
                                                      d, scale, per_key.data());
      EXPECT_EQ(std::memcmp(blocked.data(), per_key.data(), n * sizeof(float)), 0) << "d " << d << " n " << n;
      const auto want = (k.narrow(1, 0, d).to(torch::kDouble).matmul(q.to(torch::kDouble))) * scale;
      for (int64_t c = 0; c < n; ++c)
        EXPECT_NEAR(blocked[c], want[c].item<double>(), 1e-5 * std::sqrt(static_cast<double>(d)))
            << "d " << d << " n " << n << " key " << c;
    }
  }
}

}  // namespace
