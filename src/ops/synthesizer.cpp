#include "attnkit/ops/synthesizer.h"

#include "checks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace attnkit::ops {

using detail::check_rank;
using detail::fail;
using detail::shape_str;

namespace {

void check_shape(const char* op, const char* name, const at::Tensor& t,
                 std::initializer_list<int64_t> expected) {
  detail::check_defined(op, name, t);
  if (t.sizes() != at::IntArrayRef(expected))
    fail(op, fmt::format("{} has shape {}; expected {}", name, shape_str(t),
                         shape_str(at::IntArrayRef(expected))));
}

void check_window(const char* op, const char* name, const at::Tensor& t, int64_t L, int64_t S,
                  int64_t dim_l, int64_t dim_s) {
  if ((dim_l >= 0 && (L < 0 || L > t.size(dim_l))) || S < 0 || S > t.size(dim_s))
    fail(op, fmt::format("{} has shape {} which covers fewer than L={} queries or S={} keys",
                         name, shape_str(t), L, S));
}

}  // namespace

at::Tensor dense_synthesizer_logits(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& b1,
                                    const at::Tensor& w2, const at::Tensor& b2, int64_t S) {
  constexpr const char* op = "dense_synthesizer_logits";
  check_rank(op, "x", x, 4, "[batch, heads, L, d]");
  detail::check_floating(op, "x", x);
  const int64_t H = x.size(1), d = x.size(3);
  check_rank(op, "w1", w1, 3, "[heads, d, hidden]");
  const int64_t hidden = w1.size(2);
  check_shape(op, "w1", w1, {H, d, hidden});
  check_shape(op, "b1", b1, {H, hidden});
  check_rank(op, "w2", w2, 3, "[heads, hidden, S_max]");
  check_shape(op, "w2", w2, {H, hidden, w2.size(2)});
  check_shape(op, "b2", b2, {H, w2.size(2)});
  check_window(op, "w2", w2, -1, S, -1, 2);
  auto h = at::relu(at::matmul(x, w1.unsqueeze(0)) + b1.view({1, H, 1, hidden}));
  auto out = at::matmul(h, w2.narrow(2, 0, S).unsqueeze(0)) + b2.narrow(1, 0, S).view({1, H, 1, S});
  return out;
}

at::Tensor random_synthesizer_logits(const at::Tensor& r, int64_t L, int64_t S) {
  constexpr const char* op = "random_synthesizer_logits";
  check_rank(op, "r", r, 3, "[heads, L_max, S_max]");
  check_window(op, "r", r, L, S, 1, 2);
  return r.narrow(1, 0, L).narrow(2, 0, S).unsqueeze(0);
}

at::Tensor factorized_random_synthesizer_logits(const at::Tensor& r1, const at::Tensor& r2,
                                                int64_t L, int64_t S) {
  constexpr const char* op = "factorized_random_synthesizer_logits";
  check_rank(op, "r1", r1, 3, "[heads, L_max, k]");
  check_rank(op, "r2", r2, 3, "[heads, S_max, k]");
  if (r1.size(0) != r2.size(0) || r1.size(2) != r2.size(2))
    fail(op, fmt::format("r1 has shape {} and r2 has shape {}; heads and k must match",
                         shape_str(r1), shape_str(r2)));
  check_window(op, "r1", r1, L, 0, 1, 2);
  check_window(op, "r2", r2, -1, S, -1, 1);
  return at::matmul(r1.narrow(1, 0, L), r2.narrow(1, 0, S).transpose(1, 2)).unsqueeze(0);
}

at::Tensor factorized_dense_synthesizer_logits(const at::Tensor& x, const at::Tensor& wa,
                                               const at::Tensor& wb, int64_t S) {
  constexpr const char* op = "factorized_dense_synthesizer_logits";
  check_rank(op, "x", x, 4, "[batch, heads, L, d]");
  detail::check_floating(op, "x", x);
  const int64_t H = x.size(1), d = x.size(3);
  check_rank(op, "wa", wa, 3, "[heads, d, a]");
  check_rank(op, "wb", wb, 3, "[heads, d, b]");
  check_shape(op, "wa", wa, {H, d, wa.size(2)});
  check_shape(op, "wb", wb, {H, d, wb.size(2)});
  const int64_t a = wa.size(2), b = wb.size(2);
  if (a * b < S)
    fail(op, fmt::format("wa has shape {} and wb has shape {}: a·b = {} logits is fewer than "
                         "S = {}",
                         shape_str(wa), shape_str(wb), a * b, S));
  auto A = at::relu(at::matmul(x, wa.unsqueeze(0)));  // [B, H, L, a]
  auto Bf = at::relu(at::matmul(x, wb.unsqueeze(0)));  // [B, H, L, b]
  auto outer = A.unsqueeze(-1) * Bf.unsqueeze(-2);     // [B, H, L, a, b]
  return outer.flatten(-2).narrow(-1, 0, S);
}

at::Tensor mix_logits(const std::vector<at::Tensor>& logits, const at::Tensor& mixing) {
  constexpr const char* op = "mix_logits";
  if (logits.empty()) fail(op, "needs at least one logits tensor");
  check_rank(op, "mixing", mixing, 1, "[n]");
  if (mixing.size(0) != static_cast<int64_t>(logits.size()))
    fail(op, fmt::format("mixing has shape {} but {} logits tensors were given", shape_str(mixing),
                         logits.size()));
  for (size_t i = 0; i < logits.size(); ++i) {
    check_rank(op, "logits", logits[i], 4, "[batch, heads, L, S]");
    if (i > 0) {
      try {
        (void)at::infer_size(logits[0].sizes(), logits[i].sizes());
      } catch (const c10::Error&) {
        fail(op, fmt::format("logits[{}] has shape {} which does not broadcast with logits[0] {}",
                             i, shape_str(logits[i]), shape_str(logits[0])));
      }
    }
  }
  auto alpha = at::softmax(mixing, 0);
  at::Tensor out = logits[0] * alpha[0];
  for (size_t i = 1; i < logits.size(); ++i) out = out + logits[i] * alpha[static_cast<int64_t>(i)];
  return out;
}

}  // namespace attnkit::ops
