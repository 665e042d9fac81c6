// The decode gemv kernel (src/ops/cpu/gemv_kernel.h, private to the library; its symbol is
// exported by libattnkit) against a float64 product: lengths around its 16-float vectors, row
// ranges around its 4- and 8-row blocks, a leading dimension wider than the row, with and without bias.
// scripts/test_isa.sh runs it under every instruction-set copy.
#include "../../src/ops/cpu/gemv_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

TEST(GemvKernel, MatchesFloat64Product) {
  torch::manual_seed(3);
  for (int64_t in : {1, 7, 15, 16, 17, 33, 64, 80, 771}) {
    for (int64_t out : {1, 3, 4, 5, 9, 17, 64}) {
      const int64_t ldw = in + 3;
      at::Tensor storage = torch::randn({out, ldw});
      at::Tensor W = storage.narrow(1, 0, in);
      at::Tensor x = torch::randn({in}), bias = torch::randn({out});
      at::Tensor expected = at::mv(W.to(at::kDouble), x.to(at::kDouble));
      for (bool with_bias : {false, true}) {
        // Rows [begin, end): the whole matrix and a range that starts inside a 4-row block.
        for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, out}, {out / 3, out - out / 4}}) {
          at::Tensor y = torch::full({out}, 123.0f);  // rows outside [begin, end) stay untouched
          attnkit::ops::cpu::gemv_rows(storage.data_ptr<float>(), ldw, x.data_ptr<float>(), in,
                                       with_bias ? bias.data_ptr<float>() : nullptr,
                                       y.data_ptr<float>(), begin, end);
          at::Tensor want = with_bias ? expected + bias.to(at::kDouble) : expected;
          for (int64_t r = 0; r < out; ++r) {
            const double got = y[r].item<double>();
            if (r < begin || r >= end) {
              EXPECT_EQ(got, 123.0) << "in " << in << " out " << out << " row " << r;
            } else {
              // float32 accumulation of `in` products of N(0,1) values
              EXPECT_NEAR(got, want[r].item<double>(), 1e-5 * (1.0 + std::sqrt(double(in))) * 4)
                  << "in " << in << " out " << out << " row " << r << " bias " << with_bias;
            }
          }
        }
      }
    }
  }
}

}  // namespace
