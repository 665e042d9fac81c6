#include "attnkit/ops/head_gates.h"

#include "checks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace attnkit::ops {

at::Tensor apply_head_gates(const at::Tensor& context, const at::Tensor& gates) {
  constexpr const char* op = "apply_head_gates";
  detail::check_rank(op, "context", context, 4, "[batch, heads, L, dv]");
  detail::check_defined(op, "gates", gates);
  const int64_t B = context.size(0), H = context.size(1);
  const bool per_head = gates.dim() == 1 && gates.size(0) == H;
  const bool per_batch_head = gates.dim() == 2 && gates.size(0) == B && gates.size(1) == H;
  if (!per_head && !per_batch_head)
    detail::fail(op, fmt::format("gates has shape {}; expected [{}] or [{}, {}] for context {}",
                                 detail::shape_str(gates), H, B, H,
                                 detail::shape_str(context)));
  auto g = per_head ? gates.view({1, H, 1, 1}) : gates.view({B, H, 1, 1});
  return context * g.to(context.scalar_type());
}

}  // namespace attnkit::ops
