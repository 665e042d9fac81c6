// The kernels' row-major float32 GEMM (src/ops/cpu/blas.h: oneDNN's sgemm in the CMake build,
// the BLAS with ATTNKIT_GEMM=blas) against a float64 product: every transpose pair, leading
// dimensions wider than the rows, alpha and beta, beta = 0 over a C of NaNs (never read), K = 0,
// and calls from inside the kernels' parallel loop. layers::dense_linear (row_linear.h) against
// at::linear in float64, forward and backward. tests/CMakeLists.txt runs these again with
// ATTNKIT_GEMM=blas and =onednn (the default picks one by the CPU); scripts/test_isa.sh under
// every instruction-set copy.
#include "../../src/ops/cpu/blas.h"
#include "../../src/ops/cpu/parallel.h"
#include "attnkit/layers/row_linear.h"
#include "attnkit/runtime.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

namespace {

using attnkit::ops::cpu::gemm;

// op(A) [M×K] with A stored [M×K] or, transposed, [K×M], in rows of `ld` >= its width.
struct Operand {
  at::Tensor storage;  // [rows, ld]
  at::Tensor op;       // the [M×K] (or [K×N]) view as the product sees it, float64
  int64_t ld;
};

Operand operand(int64_t rows, int64_t cols, bool trans, int64_t pad) {
  const int64_t stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
  Operand o;
  o.ld = stored_cols + pad;
  o.storage = torch::randn({std::max<int64_t>(stored_rows, 1), o.ld});
  at::Tensor view = o.storage.narrow(0, 0, stored_rows).narrow(1, 0, stored_cols).to(at::kDouble);
  o.op = trans ? view.t() : view;
  return o;
}

TEST(Gemm, LibraryFollowsTheEnvironment) {
  const char* forced = std::getenv("ATTNKIT_GEMM");
  const std::string value = forced == nullptr ? "" : forced;
  const std::string expected = value == "blas" || value == "onednn"
                                   ? value
                                   : (attnkit::kernel_instruction_set() == "avx512" ? "onednn" : "blas");
  EXPECT_EQ(attnkit::gemm_library_name(), expected);
}

TEST(Gemm, MatchesFloat64Product) {
  torch::manual_seed(11);
  struct Shape { int64_t M, N, K; };
  for (Shape s : {Shape{1, 1, 1}, Shape{1, 17, 33}, Shape{5, 3, 7}, Shape{16, 16, 16},
                  Shape{33, 65, 17}, Shape{64, 1, 128}, Shape{130, 70, 300}, Shape{257, 129, 65}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair<float, float>{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}}) {
          const Operand A = operand(s.M, s.K, ta, 3), B = operand(s.K, s.N, tb, 5);
          const int64_t ldc = s.N + 2;
          at::Tensor C = torch::randn({s.M, ldc});
          at::Tensor c_before = C.narrow(1, 0, s.N).to(at::kDouble);
          if (beta == 0.0f) C.fill_(std::numeric_limits<float>::quiet_NaN());
          at::Tensor pad_before = C.narrow(1, s.N, 2).clone();
          gemm(ta, tb, s.M, s.N, s.K, alpha, A.storage.data_ptr<float>(), A.ld,
               B.storage.data_ptr<float>(), B.ld, beta, C.data_ptr<float>(), ldc);
          at::Tensor want = alpha * at::mm(A.op, B.op);
          if (beta != 0.0f) want = want + beta * c_before;
          const std::string where = "M " + std::to_string(s.M) + " N " + std::to_string(s.N) + " K " +
                                    std::to_string(s.K) + (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                                    " beta " + std::to_string(beta);
          at::Tensor got = C.narrow(1, 0, s.N).to(at::kDouble);
          ASSERT_TRUE(got.isfinite().all().item<bool>()) << where;
          // float32 sums of K products of N(0,1) values
          EXPECT_LE((got - want).abs().max().item<double>(), 1e-5 * (4.0 + std::sqrt(double(s.K)) * 4))
              << where;
          if (beta != 0.0f) EXPECT_TRUE(at::equal(C.narrow(1, s.N, 2), pad_before)) << where;
        }
  }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  at::Tensor C = torch::full({3, 4}, 2.0f);
  const float unused = 0.0f;
  gemm(false, true, 3, 4, 0, 1.0f, &unused, 1, &unused, 1, 0.5f, C.data_ptr<float>(), 4);
  EXPECT_TRUE(at::equal(C, torch::full({3, 4}, 1.0f)));
  C.fill_(std::numeric_limits<float>::quiet_NaN());
  gemm(false, false, 3, 4, 0, 1.0f, &unused, 1, &unused, 4, 0.0f, C.data_ptr<float>(), 4);
  EXPECT_TRUE(at::equal(C, torch::zeros({3, 4})));
}

// As the flash kernel calls it: one tile product per task of the parallel loop, each on its thread.
TEST(Gemm, InsideTheParallelLoop) {
  torch::manual_seed(12);
  const int64_t tasks = 4, M = 128, N = 136, K = 64;  // above the BLAS threshold: oneDNN's
  at::Tensor A = torch::randn({tasks, M, K}), B = torch::randn({tasks, N, K});
  at::Tensor C = torch::empty({tasks, M, N});
  attnkit::ops::cpu::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      gemm(false, true, M, N, K, 1.0f, A[t].data_ptr<float>(), K, B[t].data_ptr<float>(), K, 0.0f,
           C[t].data_ptr<float>(), N);
  });
  at::Tensor want = at::bmm(A.to(at::kDouble), B.to(at::kDouble).transpose(1, 2));
  EXPECT_LE((C.to(at::kDouble) - want).abs().max().item<double>(), 1e-4);
}

// Rows for the few-row kernels (1, 2 x 33), for the GEMM above the BLAS threshold of
// ops/cpu/blas.h (70, 2 x 300); with and without gradients, with the same bits. Under
// ATTNKIT_DECODE_FEW_ROWS_MAX=0 (ops.gemm_on_*) every count takes the GEMM, one row included,
// whose result must be a buffer of its own, not the bias it starts from.
TEST(DenseLinear, MatchesFloat64Linear) {
  torch::manual_seed(13);
  for (auto sizes : {std::vector<int64_t>{70, 96}, std::vector<int64_t>{2, 300, 96}, std::vector<int64_t>{2, 33, 96},
                     std::vector<int64_t>{96}}) {
    at::Tensor x = torch::randn(sizes);
    at::Tensor storage = torch::randn({80, 100});
    at::Tensor w = storage.narrow(1, 2, 96);  // rows wider than the layer
    at::Tensor wt = torch::randn({96, 80}).t();  // a transposed view: copied
    at::Tensor b = torch::randn({80});
    const at::Tensor b_before = b.clone();
    for (const at::Tensor& weight : {w, wt})
      for (bool with_bias : {true, false})
        for (bool grad : {false, true}) {
          const at::Tensor wg = grad ? weight.detach().requires_grad_() : weight;
          at::Tensor y = attnkit::layers::dense_linear(x, wg, with_bias ? b : at::Tensor());
          EXPECT_EQ(y.requires_grad(), grad);
          at::Tensor want = at::linear(x.to(at::kDouble), weight.to(at::kDouble),
                                       with_bias ? b.to(at::kDouble) : at::Tensor());
          ASSERT_EQ(y.sizes(), want.sizes());
          EXPECT_EQ(y.scalar_type(), at::kFloat);
          EXPECT_LE((y.detach().to(at::kDouble) - want).abs().max().item<double>(), 1e-4)
              << "x " << x.sizes() << " weight strides " << weight.strides() << " bias " << with_bias
              << " grad " << grad;
          EXPECT_TRUE(at::equal(b, b_before));
          if (grad) {
            torch::NoGradGuard no_grad;
            EXPECT_TRUE(at::equal(y.detach(), attnkit::layers::dense_linear(x, weight, with_bias ? b : at::Tensor())));
          }
        }
  }
}

// The backward's two GEMMs against float64 autograd, for x and weight alone and together, with
// and without bias; a backward that records a graph (create_graph) still gives second derivatives.
TEST(DenseLinear, GradientsMatchFloat64Autograd) {
  torch::manual_seed(14);
  for (int which = 0; which < 3; ++which)  // 0: x, 1: weight and bias, 2: all
    for (bool with_bias : {true, false}) {
      at::Tensor x0 = torch::randn({2, 37, 24}), w0 = torch::randn({19, 24}), b0 = torch::randn({19});
      at::Tensor up = torch::randn({2, 37, 19});
      at::Tensor x = x0.clone().requires_grad_(which != 1);
      at::Tensor w = w0.clone().requires_grad_(which != 0), b = b0.clone().requires_grad_(which != 0);
      at::Tensor y = attnkit::layers::dense_linear(x, w, with_bias ? b : at::Tensor());
      ASSERT_TRUE(y.requires_grad());
      (y * up).sum().backward();
      at::Tensor xd = x0.to(at::kDouble).requires_grad_(), wd = w0.to(at::kDouble).requires_grad_();
      at::Tensor bd = b0.to(at::kDouble).requires_grad_();
      (at::linear(xd, wd, with_bias ? bd : at::Tensor()) * up.to(at::kDouble)).sum().backward();
      EXPECT_LE((y.to(at::kDouble) - at::linear(xd, wd, with_bias ? bd : at::Tensor())).abs().max().item<double>(), 1e-4);
      if (which != 1) EXPECT_LE((x.grad().to(at::kDouble) - xd.grad()).abs().max().item<double>(), 1e-4);
      else EXPECT_FALSE(x.grad().defined());
      if (which != 0) {
        EXPECT_LE((w.grad().to(at::kDouble) - wd.grad()).abs().max().item<double>(), 1e-3);
        if (with_bias) EXPECT_LE((b.grad().to(at::kDouble) - bd.grad()).abs().max().item<double>(), 1e-3);
        else EXPECT_FALSE(b.grad().defined());
      }
    }
  // d/dw of |dL/dx|² with L = sum(linear(x, w)): needs the backward's own graph.
  at::Tensor x = torch::randn({5, 3}, torch::requires_grad()), w = torch::randn({4, 3}, torch::requires_grad());
  at::Tensor gx = torch::autograd::grad({attnkit::layers::dense_linear(x, w, {}).sum()}, {x}, {}, true, true)[0];
  at::Tensor gw = torch::autograd::grad({gx.pow(2).sum()}, {w})[0];
  // dL/dx = 1·w (every row), so |dL/dx|² = 5 · Σ_j (Σ_o w_oj)² and its derivative is 10 · Σ_o w_oj.
  EXPECT_TRUE(at::allclose(gw, (10 * w.detach().sum(0)).expand({4, 3}), 1e-4, 1e-5));
  // Float64 operands take at::linear: the result keeps their dtype.
  torch::NoGradGuard no_grad;
  EXPECT_EQ(attnkit::layers::dense_linear(x.to(at::kDouble), w.to(at::kDouble), {}).scalar_type(), at::kDouble);
}

}  // namespace
