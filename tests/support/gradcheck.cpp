#include "support/gradcheck.h"

#include <torch/torch.h>

#include <fmt/format.h>

namespace attnkit::testing {

GradcheckResult gradcheck(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
                          std::vector<at::Tensor> inputs, double eps, double atol, double rtol) {
  GradcheckResult result;
  for (auto& x : inputs) {
    if (x.requires_grad() && x.scalar_type() != at::kDouble)
      throw std::invalid_argument("gradcheck: differentiable inputs must be float64");
  }
  auto out = f(inputs);
  auto cotangent = torch::randn_like(out);
  std::vector<at::Tensor> diff;
  for (auto& x : inputs)
    if (x.requires_grad()) diff.push_back(x);
  auto grads = torch::autograd::grad({(out * cotangent).sum()}, diff, {}, false, false, true);

  torch::NoGradGuard no_grad;
  size_t gi = 0;
  for (size_t idx = 0; idx < inputs.size(); ++idx) {
    auto& x = inputs[idx];
    if (!x.requires_grad()) continue;
    auto analytic = grads[gi++];
    if (!analytic.defined()) analytic = torch::zeros_like(x);
    auto flat = x.view(-1);
    auto analytic_flat = analytic.contiguous().view(-1);
    for (int64_t e = 0; e < flat.numel(); ++e) {
      const double orig = flat[e].item<double>();
      flat[e] = orig + eps;
      const double plus = (f(inputs) * cotangent).sum().item<double>();
      flat[e] = orig - eps;
      const double minus = (f(inputs) * cotangent).sum().item<double>();
      flat[e] = orig;
      const double numeric = (plus - minus) / (2 * eps);
      const double a = analytic_flat[e].item<double>();
      const double err = std::abs(numeric - a);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (err > atol + rtol * std::abs(numeric) && result.ok) {
        result.ok = false;
        result.message = fmt::format("input {} element {}: analytic {} vs numeric {}", idx, e, a,
                                     numeric);
      }
    }
  }
  return result;
}

}  // namespace attnkit::testing
