// The int8 scheme (layers/int8_linear.h) against a float64 oracle: the quantization round trip,
// the product's integer sums exactly, its error within the scheme's bound of the float product,
// and quantized layers (feed-forward: forward = step).
#include "../../src/ops/cpu/int8_gemm_kernel.h"
#include "attnkit/error.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/layers/int8_linear.h"
#include "attnkit/layers/row_linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace {

using namespace attnkit;

// Oracle of the per-row quantization, in float64 over the kernel's ints: every q in [-127, 127],
// the largest |q| of a nonzero row 127, the scale max|row| / 127, and |x - q·scale| ≤ scale/2.
void check_quantized(const at::Tensor& x, const layers::Int8Weight& q) {
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor qd = q.values.to(at::kDouble), sd = q.scale.to(at::kDouble);
  ASSERT_EQ(q.values.scalar_type(), at::kChar);
  ASSERT_EQ(q.values.sizes(), x.sizes());
  ASSERT_LE(qd.abs().max().item<double>(), 127.0);
  for (int64_t r = 0; r < x.size(0); ++r) {
    const double amax = xd[r].abs().max().item<double>();
    const double scale = sd[r].item<double>();
    if (amax == 0) {
      EXPECT_EQ(scale, 0.0);
      EXPECT_EQ(qd[r].abs().max().item<double>(), 0.0);
      continue;
    }
    EXPECT_NEAR(scale, amax / 127.0, 1e-6 * amax / 127.0) << "row " << r;
    EXPECT_EQ(qd[r].abs().max().item<double>(), 127.0) << "row " << r;
    const double err = (xd[r] - qd[r] * scale).abs().max().item<double>();
    EXPECT_LE(err, scale / 2 * (1 + 1e-5)) << "row " << r;
  }
}

TEST(Int8Linear, QuantizeRoundTripWithinHalfAStep) {
  torch::manual_seed(1);
  for (int64_t in : {1, 7, 16, 33, 576}) {
    at::Tensor x = torch::randn({9, in}) * torch::logspace(-3, 3, 9).unsqueeze(1);
    x[4].zero_();  // a row of zeros: scale 0
    check_quantized(x, layers::quantize_int8(x));
    const at::Tensor back = layers::dequantize_int8(layers::quantize_int8(x));
    EXPECT_TRUE(torch::allclose(back[4], torch::zeros({in})));
  }
  EXPECT_THROW(layers::quantize_int8(torch::randn({3, 4}, at::kDouble)), Error);
  EXPECT_THROW(layers::quantize_int8(torch::randn({3})), Error);
}

// y[m, r] = float(Σ) · (sw · sx) + b with Σ the oracle's int64 sum: equal to the bit, so the
// kernel's integer sums are the oracle's; and within the scheme's error bound of x · Wᵀ + b.
void check_product(int64_t rows, int64_t in, int64_t out, bool bias) {
  torch::manual_seed(rows * 1000 + in);
  const at::Tensor w = torch::randn({out, in}) * 0.1, x = torch::randn({rows, in}) * 3;
  const at::Tensor b = bias ? torch::randn({out}) : at::Tensor();
  const layers::Int8Weight qw = layers::quantize_int8(w);
  const layers::Int8Weight qx = layers::quantize_int8(x);  // the activations' own quantization
  const at::Tensor y = layers::int8_linear(x, qw, b);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{rows, out}));
  // The weight in panels (the VNNI panel kernel, or its plain loop without VNNI): the same bits.
  EXPECT_TRUE(torch::equal(layers::int8_linear(x, layers::pack_int8(qw), b), y))
      << "packed " << rows << "x" << in << "->" << out;
  const at::Tensor sums = at::matmul(qx.values.to(at::kLong), qw.values.to(at::kLong).t());
  // |Σ| < 2^24 here, so float(Σ) is exact and a wrong sum shows.
  ASSERT_LT(sums.abs().max().item<int64_t>(), int64_t(1) << 24);
  const at::Tensor scales = qx.scale.unsqueeze(1) * qw.scale.unsqueeze(0);  // float products
  at::Tensor expected = sums.to(at::kFloat) * scales;
  if (bias) expected = expected + b;
  EXPECT_TRUE(torch::equal(y, expected)) << rows << "x" << in << "->" << out << " max diff "
                                         << (y - expected).abs().max().item<double>();
  // Error bound: Σ_i |W| sx/2 + |X| sw/2 + sw sx/4, plus float rounding of the result.
  const at::Tensor wd = w.to(at::kDouble), xd = x.to(at::kDouble);
  const at::Tensor sw = qw.scale.to(at::kDouble), sx = qx.scale.to(at::kDouble);
  at::Tensor exact = at::matmul(xd, wd.t());
  if (bias) exact = exact + b.to(at::kDouble);
  const at::Tensor bound = at::matmul(at::ones({rows, in}, at::kDouble), wd.abs().t()) * sx.unsqueeze(1) / 2 +
                           at::matmul(xd.abs(), at::ones({in, out}, at::kDouble)) * sw.unsqueeze(0) / 2 +
                           sx.unsqueeze(1) * sw.unsqueeze(0) * (in / 4.0);
  const at::Tensor err = (y.to(at::kDouble) - exact).abs();
  EXPECT_TRUE((err <= bound * 1.0001 + 1e-5 * exact.abs() + 1e-6).all().item<bool>())
      << rows << "x" << in << "->" << out << " worst err/bound "
      << (err / (bound + 1e-12)).max().item<double>();
  // And far inside it on random data: within 3% of the output's scale.
  EXPECT_LT(err.max().item<double>(), 0.03 * exact.abs().max().item<double>());
}

TEST(Int8Linear, ProductEqualsIntegerOracleAndBoundsFloatProduct) {
  for (int64_t rows : {1, 2, 3, 4, 5, 9})
    for (int64_t in : {1, 15, 16, 17, 64, 200})
      check_product(rows, in, 13, rows % 2 == 1);
  check_product(1, 576, 576, true);
  check_product(70, 96, 40, true);  // more rows than the decoding kernels' few rows
  // The VNNI copy's 64-byte chunks and masked tails, and its 4 × 4 blocks with partial edges.
  for (int64_t in : {63, 65, 128, 130, 1000})
    for (int64_t rows : {1, 6, 16, 17})
      check_product(rows, in, 11, rows % 2 == 0);
  // The panel kernel's L2-sized chunks: 64 KiB panels at in = 4096, so 8 to a chunk; 17 panels
  // (the last one partial) make two whole chunks and a last one of one panel, 9 rows two blocks.
  check_product(9, 4096, 16 * 16 + 5, true);
}

TEST(Int8Linear, ExtremeValuesSumExactly) {
  // Every weight and input at ±127 after quantization: the largest sums the scheme produces (the
  // VNNI copy's unsigned bytes reach 255 before its correction), equal to the integer oracle.
  const int64_t in = 4096, out = 6, rows = 5;
  at::Tensor w = torch::ones({out, in});
  w[1].neg_();
  w[3].narrow(0, 0, in / 2).neg_();
  at::Tensor x = torch::ones({rows, in});
  x[2].neg_();
  x[4].narrow(0, 1, in - 1).neg_();
  const layers::Int8Weight qw = layers::quantize_int8(w), qx = layers::quantize_int8(x);
  const at::Tensor sums = at::matmul(qx.values.to(at::kLong), qw.values.to(at::kLong).t());
  EXPECT_EQ(sums.abs().max().item<int64_t>(), in * 127 * 127);
  const at::Tensor y = layers::int8_linear(x, qw, at::Tensor());
  const at::Tensor expected = sums.to(at::kFloat) * (qx.scale.unsqueeze(1) * qw.scale.unsqueeze(0));
  EXPECT_TRUE(torch::equal(y, expected)) << (y - expected).abs().max().item<double>();
  // The panel kernel's unsigned activations reach 255 · 127 per product before the correction.
  EXPECT_TRUE(torch::equal(layers::int8_linear(x, layers::pack_int8(qw), at::Tensor()), expected));
}

// Panels: pack then unpack gives the values back (rows past a panel's 16 and inputs past a group's
// 4 included); one call over packed and row-major layers gives each layer's own product; a packed
// weight meets only inputs of its length.
TEST(Int8Linear, PackedPanelsRoundTripAndMixedLayers) {
  torch::manual_seed(11);
  for (int64_t out : {1, 15, 16, 17, 33, 70})
    for (int64_t in : {1, 3, 4, 5, 67}) {
      const layers::Int8Weight q = layers::quantize_int8(torch::randn({out, in}));
      const layers::Int8Weight p = layers::pack_int8(q);
      ASSERT_TRUE(p.is_packed());
      EXPECT_FALSE(p.values.defined());
      EXPECT_EQ(p.in(), in);
      EXPECT_EQ(p.out(), out);
      EXPECT_TRUE(torch::equal(layers::unpack_int8(p).values, q.values)) << out << "x" << in;
      EXPECT_TRUE(torch::equal(layers::dequantize_int8(p), layers::dequantize_int8(q)));
      EXPECT_TRUE(torch::equal(p.sums.to(at::kLong), q.values.to(at::kLong).sum(1) * 128));
      const at::Tensor x = torch::randn({6, in});
      const layers::Int8Weight other = layers::quantize_int8(torch::randn({9, in}));
      const at::Tensor b = torch::randn({out});
      const auto mixed = layers::int8_linear(x, {p, other}, {b, at::Tensor()});
      EXPECT_TRUE(torch::equal(mixed[0], layers::int8_linear(x, q, b)));
      EXPECT_TRUE(torch::equal(mixed[1], layers::int8_linear(x, other, at::Tensor())));
      if (in % 4 != 0) {  // a longer row fills the same groups of 4: still refused
        EXPECT_THROW(layers::int8_linear(torch::randn({2, in + 1}), p, b), Error);
      }
    }
  EXPECT_THROW(layers::pack_int8(layers::Int8Weight{}), Error);
}

TEST(Int8Linear, ZeroRowsAndEmptyInputs) {
  const layers::Int8Weight qw = layers::quantize_int8(torch::randn({5, 8}));
  const at::Tensor b = torch::randn({5});
  // A row of zeros gives the bias alone.
  EXPECT_TRUE(torch::equal(layers::int8_linear(torch::zeros({2, 8}), qw, b), b.expand({2, 5})));
  EXPECT_EQ(layers::int8_linear(torch::zeros({0, 8}), qw, b).sizes(), (std::vector<int64_t>{0, 5}));
  // Shapes [batch, n, in] keep their leading dimensions.
  EXPECT_EQ(layers::int8_linear(torch::randn({2, 3, 8}), qw, b).sizes(), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_THROW(layers::int8_linear(torch::randn({2, 7}), qw, b), Error);
  EXPECT_THROW(layers::int8_linear(torch::randn({2, 8}, at::kDouble), qw, b), Error);
  EXPECT_THROW(layers::int8_linear(torch::randn({2, 8}), qw, torch::randn({4})), Error);
}

TEST(Int8Linear, ARowWithNaNOrInfinityGivesNaNOutputs) {
  // No finite scale represents such a row: its scale is NaN and so is every output of it; the
  // other rows are untouched.
  const layers::Int8Weight qw = layers::quantize_int8(torch::randn({5, 40}));
  at::Tensor x = torch::randn({3, 40});
  x[0][7] = std::nanf("");
  x[2][39] = -INFINITY;
  const layers::Int8Weight qx = layers::quantize_int8(x);
  EXPECT_TRUE(std::isnan(qx.scale[0].item<float>()));
  EXPECT_TRUE(std::isnan(qx.scale[2].item<float>()));
  EXPECT_TRUE(std::isfinite(qx.scale[1].item<float>()));
  const at::Tensor y = layers::int8_linear(x, qw, at::Tensor());
  EXPECT_TRUE(y[0].isnan().all().item<bool>());
  EXPECT_TRUE(y[2].isnan().all().item<bool>());
  EXPECT_TRUE(y[1].isfinite().all().item<bool>());
}

TEST(Int8Linear, ComputeTypeNames) {
  EXPECT_EQ(layers::parse_compute_type("float32", "--compute-type"), layers::ComputeType::Float32);
  EXPECT_EQ(layers::parse_compute_type("int8", "--compute-type"), layers::ComputeType::Int8);
  EXPECT_EQ(layers::parse_compute_type("bf16", "--compute-type"), layers::ComputeType::Bf16);
  for (const char* bad : {"int16", "", "INT8", "float16"}) {
    try {
      layers::parse_compute_type(bad, "--compute-type");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--compute-type"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
  EXPECT_NE(layers::bf16_note().find("float32"), std::string::npos);
}

// A quantized feed-forward block: its float weights released, int8 buffers in its state; forward
// (many rows) and step (one row and a few) equal the chain of int8 products; float32 within the
// scheme's error; quantizing twice changes nothing.
TEST(Int8Linear, QuantizedFeedForwardForwardEqualsStep) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  for (bool gated : {false, true}) {
    layers::FeedForward ffn(layers::FeedForwardOptions(24, 40).gated(gated).activation(
        gated ? layers::Activation::Silu : layers::Activation::Gelu));
    const at::Tensor x = torch::randn({2, 5, 24});
    const at::Tensor float_y = ffn->forward(x);
    EXPECT_EQ(layers::quantize_linears(*ffn), gated ? 3 : 2);
    EXPECT_EQ(layers::quantize_linears(*ffn), 0);
    EXPECT_TRUE(layers::has_int8_layers(*ffn));
    EXPECT_EQ(ffn->fc_in->weight.numel(), 0);
    const auto buffers = ffn->named_buffers();
    ASSERT_NE(buffers.find("fc_in.weight_int8"), nullptr);
    ASSERT_NE(buffers.find("fc_out.weight_scale"), nullptr);
    const at::Tensor y = ffn->forward(x);
    for (int64_t rows : {1, 3}) {
      const at::Tensor xs = x.narrow(0, 0, 1).narrow(1, 0, rows);
      // Rows quantize alone, so equal up to the element-wise activation's vector tails.
      EXPECT_TRUE(torch::allclose(ffn->step(xs), y.narrow(0, 0, 1).narrow(1, 0, rows), 1e-5, 1e-6)) << rows;
    }
    EXPECT_TRUE(torch::allclose(y, float_y, 0.05, 0.05)) << (y - float_y).abs().max().item<double>();
    EXPECT_FALSE(torch::equal(y, float_y));
  }
}

// Two feed-forward blocks whose fc_in share one weight tensor: quantized once, packed once (the
// second finds the first's panels, though the shared row-major copy is gone by then), the same
// outputs as before packing.
TEST(Int8Linear, TiedLayersPackOnce) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  struct Pair : torch::nn::Module {
    layers::FeedForward a{layers::FeedForwardOptions(24, 40)}, b{layers::FeedForwardOptions(24, 40)};
    Pair() {
      register_module("a", a);
      register_module("b", b);
      b->fc_in->weight = a->fc_in->weight;  // one tensor (what quantize_linears counts as tied)
    }
  } pair;
  EXPECT_EQ(layers::quantize_linears(pair), 4);
  const at::Tensor x = torch::randn({3, 24});
  const at::Tensor ya = pair.a->forward(x), yb = pair.b->forward(x);
  const int64_t packed = layers::pack_int8_layers(pair);
  EXPECT_EQ(packed, attnkit::ops::cpu::int8_panels_preferred(24) ? 4 : 0);
  EXPECT_EQ(layers::has_packed_int8(pair), packed > 0);
  EXPECT_TRUE(torch::equal(pair.a->forward(x), ya));
  EXPECT_TRUE(torch::equal(pair.b->forward(x), yb));
}

}  // namespace
