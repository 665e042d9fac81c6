#pragma once
// Finite-difference gradient check in float64 (LibTorch's C++ API has no gradcheck).
// For f: inputs -> tensor, compares autograd's gradient of <f(x), g> (g a fixed random cotangent)
// with central differences, element by element, for every input that requires grad.
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace attnkit::testing {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string message;  // first mismatch, empty when ok
};

GradcheckResult gradcheck(const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f,
                          std::vector<at::Tensor> inputs, double eps = 1e-6, double atol = 1e-5,
                          double rtol = 1e-4);

}  // namespace attnkit::testing
