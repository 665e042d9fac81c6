// The decode gemv kernel (src/ops/cpu/gemv_kernel.h, private to the library; its symbol is
// exported by libattnkit) against a float64 product: lengths around its 16-float vectors, row
// ranges around its 4- and 8-row blocks, a leading dimension wider than the row, with and without bias;
// the few-row kernel (gemm_few_rows) the same way for 1 to 13 rows of x, and split at any row
// (as threads split it) bit for bit equal to one call.
// scripts/test_isa.sh runs it under every instruction-set copy.
#include "../../src/ops/cpu/gemv_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

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

TEST(GemmFewRows, MatchesFloat64Product) {
  torch::manual_seed(5);
  for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 13}) {
    for (int64_t in : {1, 7, 16, 17, 33, 80, 771}) {
      for (int64_t out : {1, 3, 4, 5, 9, 17, 64}) {
        const int64_t ldw = in + 3, ldx = in + 5, ldy = out + 2;
        at::Tensor w_storage = torch::randn({out, ldw}), x_storage = torch::randn({M, ldx});
        at::Tensor W = w_storage.narrow(1, 0, in), X = x_storage.narrow(1, 0, in);
        at::Tensor bias = torch::randn({out});
        at::Tensor expected = at::mm(X.to(at::kDouble), W.to(at::kDouble).t());  // [M, out]
        for (bool with_bias : {false, true}) {
          at::Tensor want = with_bias ? expected + bias.to(at::kDouble) : expected;
          for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, out}, {out / 3, out - out / 4}}) {
            at::Tensor y = torch::full({M, ldy}, 123.0f);  // outside [begin, end): untouched
            attnkit::ops::cpu::gemm_few_rows(w_storage.data_ptr<float>(), ldw,
                                             x_storage.data_ptr<float>(), ldx, M, in,
                                             with_bias ? bias.data_ptr<float>() : nullptr,
                                             y.data_ptr<float>(), ldy, begin, end);
            const auto ya = y.accessor<float, 2>();
            const auto wa = want.accessor<double, 2>();
            for (int64_t m = 0; m < M; ++m)
              for (int64_t r = 0; r < ldy; ++r) {
                const double got = ya[m][r];
                if (r < begin || r >= end) {
                  ASSERT_EQ(got, 123.0) << "M " << M << " in " << in << " out " << out << " row " << r;
                } else {
                  ASSERT_NEAR(got, wa[m][r], 1e-5 * (1.0 + std::sqrt(double(in))) * 4)
                      << "M " << M << " in " << in << " out " << out << " x row " << m << " row "
                      << r << " bias " << with_bias;
                }
              }
          }
          // Split at every row (two threads' ranges): the same bits as one call.
          at::Tensor whole = torch::zeros({M, out});
          attnkit::ops::cpu::gemm_few_rows(w_storage.data_ptr<float>(), ldw,
                                           x_storage.data_ptr<float>(), ldx, M, in,
                                           with_bias ? bias.data_ptr<float>() : nullptr,
                                           whole.data_ptr<float>(), out, 0, out);
          for (int64_t split = 1; split < out; split += std::max<int64_t>(1, out / 5)) {
            at::Tensor parts = torch::zeros({M, out});
            for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, split}, {split, out}})
              attnkit::ops::cpu::gemm_few_rows(w_storage.data_ptr<float>(), ldw,
                                               x_storage.data_ptr<float>(), ldx, M, in,
                                               with_bias ? bias.data_ptr<float>() : nullptr,
                                               parts.data_ptr<float>(), out, begin, end);
            ASSERT_TRUE(torch::equal(parts, whole)) << "M " << M << " in " << in << " out " << out
                                                    << " split " << split;
          }
        }
      }
    }
  }
}

}  // namespace
