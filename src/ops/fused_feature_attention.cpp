#include "fused_feature_attention.h"

#include "attnkit/ops/cosformer_attention.h"
#include "cpu/parallel.h"
#include "cpu/blas.h"
#include "cpu/fused_feature_attention_kernel.h"
#include "feature_attention.h"

#include "attnkit/ops/masks.h"

#include <torch/torch.h>

#include <vector>

namespace attnkit::ops::detail {

namespace {

cpu::FeatureProblem feature_problem(const at::Tensor& q, const at::Tensor& v, FeatureMapKind feature,
                                    double angle_step, bool clamp) {
  cpu::FeatureProblem p;
  p.n = q.size(2);
  p.d = q.size(3);
  p.e = v.size(3);
  p.feature = feature;
  p.angle_step = angle_step;
  p.clamp = clamp;
  p.eps = kFeatureAttentionEpsilon;
  return p;
}

// The same attention from ATen ops (differentiable to any order): the path for create_graph.
at::Tensor unfused_feature_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& keep, const at::Tensor& prefix,
                                     FeatureMapKind feature, double angle_step, bool clamp,
                                     bool causal) {
  auto phi = [&](const at::Tensor& x) {
    switch (feature) {
      case FeatureMapKind::Elu: return at::elu(x) + 1;
      case FeatureMapKind::Relu: return at::relu(x);
      case FeatureMapKind::Favor:  // never fused (fused_feature_applies)
      case FeatureMapKind::T2r:
      case FeatureMapKind::Hedgehog:
      case FeatureMapKind::CosRelu: break;
    }
    auto angles = at::arange(1, x.size(2) + 1, x.options().dtype(at::kDouble)) * angle_step;
    return cosformer_features(x, angles.to(x.scalar_type()));
  };
  auto phi_k = phi(k);
  if (keep.defined())
    phi_k = phi_k * keep.to(phi_k.scalar_type()).view({keep.size(0), 1, keep.size(1), 1});
  const auto denominator = clamp ? Denominator::ClampEpsilon : Denominator::AddEpsilon;
  if (prefix.defined())  // prefix-LM: through the explicit [B, 1, n, n] mask
    return masked_feature_attention(phi(q), phi_k, v, prefix_lm_mask(prefix, q.size(2)),
                                    denominator);
  return feature_attention(phi(q), phi_k, v, causal, denominator);
}

size_t workspace_size(const cpu::FeatureProblem& p, bool causal, bool prefix) {
  if (prefix) return cpu::prefix_workspace(p);
  return causal ? cpu::feature_attention_workspace(p) : cpu::non_causal_workspace(p);
}

struct FusedSettings {
  FeatureMapKind feature;
  double angle_step;
  bool clamp, causal;
};

FusedSettings settings_of(torch::autograd::AutogradContext* ctx) {
  return {static_cast<FeatureMapKind>(ctx->saved_data["feature"].toInt()),
          ctx->saved_data["angle_step"].toDouble(), ctx->saved_data["clamp"].toBool(),
          ctx->saved_data["causal"].toBool()};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fused_feature_forward(
    const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& keep_in, const at::Tensor& prefix_in, FeatureMapKind feature,
    double angle_step, bool clamp, bool causal) {
  auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  at::Tensor keep;
  if (keep_in.defined()) keep = keep_in.contiguous();
  at::Tensor prefix;  // int64 [B] (prefix-LM mode) or undefined
  if (prefix_in.defined()) prefix = prefix_in.contiguous();
  const auto p = feature_problem(q, v, feature, angle_step, clamp);
  const int64_t B = q.size(0), H = q.size(1), S = k.size(2);
  auto y = at::empty({B, H, p.n, p.e}, v.options());
  auto den = at::empty({B, H, p.n}, v.options());
  if (y.numel() > 0) {
    cpu::SingleThreadedBlas single_threaded_blas;
    const bool* kp_keep = keep.defined() ? keep.data_ptr<bool>() : nullptr;
    const int64_t* prefix_of = prefix.defined() ? prefix.data_ptr<int64_t>() : nullptr;
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "feature_attention", [&] {
      const scalar_t *qp = q.data_ptr<scalar_t>(), *kp = k.data_ptr<scalar_t>(),
                     *vp = v.data_ptr<scalar_t>();
      scalar_t *yp = y.data_ptr<scalar_t>(), *dp = den.data_ptr<scalar_t>();
      cpu::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> workspace(workspace_size(p, causal, prefix_of != nullptr));
        for (int64_t i = begin; i < end; ++i) {
          const scalar_t *qi = qp + i * p.n * p.d, *ki = kp + i * S * p.d, *vi = vp + i * S * p.e;
          scalar_t *yi = yp + i * p.n * p.e, *di = dp + i * p.n;
          if (prefix_of)
            cpu::prefix_feature_attention_forward(p, prefix_of[i / H], qi, ki, vi,
                                                  kp_keep ? kp_keep + (i / H) * S : nullptr, yi,
                                                  di, workspace.data());
          else if (causal)
            cpu::causal_feature_attention_forward(p, qi, ki, vi, yi, di, workspace.data());
          else
            cpu::feature_attention_forward(p, S, qi, ki, vi, kp_keep ? kp_keep + (i / H) * S : nullptr,
                                           yi, di, workspace.data());
        }
      });
    });
  } else {
    y.zero_();
  }
  return {y, den};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_feature_backward(
    const at::Tensor& grad_out, const at::Tensor& q_in, const at::Tensor& k_in,
    const at::Tensor& v_in, const at::Tensor& y_in, const at::Tensor& den_in,
    const at::Tensor& keep_in, const at::Tensor& prefix_in, FeatureMapKind feature,
    double angle_step, bool clamp, bool causal) {
  const auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const auto y = y_in.contiguous(), den = den_in.contiguous(), g = grad_out.contiguous();
  at::Tensor keep, prefix;
  if (keep_in.defined()) keep = keep_in.contiguous();
  if (prefix_in.defined()) prefix = prefix_in.contiguous();
  const auto p = feature_problem(q, v, feature, angle_step, clamp);
  const int64_t B = q.size(0), H = q.size(1), S = k.size(2);
  auto dq = at::zeros_like(q), dk = at::zeros_like(k), dv = at::zeros_like(v);
  if (y.numel() > 0 && S > 0) {
    cpu::SingleThreadedBlas single_threaded_blas;
    const bool* kp_keep = keep.defined() ? keep.data_ptr<bool>() : nullptr;
    const int64_t* prefix_of = prefix.defined() ? prefix.data_ptr<int64_t>() : nullptr;
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "feature_attention_backward", [&] {
      const scalar_t *qp = q.data_ptr<scalar_t>(), *kp = k.data_ptr<scalar_t>(),
                     *vp = v.data_ptr<scalar_t>(), *yp = y.data_ptr<scalar_t>(),
                     *dp = den.data_ptr<scalar_t>(), *gp = g.data_ptr<scalar_t>();
      scalar_t *dqp = dq.data_ptr<scalar_t>(), *dkp = dk.data_ptr<scalar_t>(),
               *dvp = dv.data_ptr<scalar_t>();
      cpu::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> workspace(workspace_size(p, causal, prefix_of != nullptr));
        for (int64_t i = begin; i < end; ++i) {
          const int64_t qo = i * p.n * p.d, ko = i * S * p.d, vo = i * S * p.e, yo = i * p.n * p.e;
          if (prefix_of)
            cpu::prefix_feature_attention_backward(
                p, prefix_of[i / H], qp + qo, kp + ko, vp + vo,
                kp_keep ? kp_keep + (i / H) * S : nullptr, yp + yo, dp + i * p.n, gp + yo,
                dqp + qo, dkp + ko, dvp + vo, workspace.data());
          else if (causal)
            cpu::causal_feature_attention_backward(p, qp + qo, kp + ko, vp + vo, yp + yo,
                                                   dp + i * p.n, gp + yo, dqp + qo, dkp + ko,
                                                   dvp + vo, workspace.data());
          else
            cpu::feature_attention_backward(p, S, qp + qo, kp + ko, vp + vo,
                                            kp_keep ? kp_keep + (i / H) * S : nullptr, yp + yo,
                                            dp + i * p.n, gp + yo, dqp + qo, dkp + ko, dvp + vo,
                                            workspace.data());
        }
      });
    });
  }
  return {dq, dk, dv};
}

namespace {

// Causal (L = S), non-causal (any L, S; optional key padding) or prefix-LM (L = S, prefix
// lengths defined; optional key padding) feature attention with the feature map inside the
// chunked kernels.
class FusedFeatureAttention : public torch::autograd::Function<FusedFeatureAttention> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in,
                            const at::Tensor& k_in, const at::Tensor& v_in,
                            const c10::optional<at::Tensor>& keep_in,
                            const c10::optional<at::Tensor>& prefix_in, int64_t feature, double angle_step, bool clamp, bool causal) {
    at::Tensor keep, prefix;
    if (keep_in.has_value() && keep_in->defined()) keep = *keep_in;
    if (prefix_in.has_value() && prefix_in->defined()) prefix = *prefix_in;
    auto [y, den] = fused_feature_forward(q_in, k_in, v_in, keep, prefix,
                                          static_cast<FeatureMapKind>(feature), angle_step, clamp,
                                          causal);
    // The inputs as given (views stay views: no second copy is kept alive).
    ctx->save_for_backward({q_in, k_in, v_in, y, den, keep, prefix});
    ctx->saved_data["feature"] = feature;
    ctx->saved_data["angle_step"] = angle_step;
    ctx->saved_data["clamp"] = clamp;
    ctx->saved_data["causal"] = causal;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &y = saved[3], &den = saved[4], &keep = saved[5], &prefix = saved[6];
    const auto set = settings_of(ctx);
    torch::autograd::variable_list result(9);
    if (at::GradMode::is_enabled()) {
      // create_graph: differentiate the composition so that the gradient has a graph too.
      torch::autograd::variable_list inputs;
      std::vector<size_t> which;
      for (size_t i = 0; i < 3; ++i)
        if (saved[i].requires_grad()) {
          inputs.push_back(saved[i]);
          which.push_back(i);
        }
      if (inputs.empty()) return result;
      auto out = unfused_feature_attention(saved[0], saved[1], saved[2], keep, prefix,
                                           set.feature, set.angle_step, set.clamp, set.causal);
      auto g = torch::autograd::grad({out}, inputs, {grads[0]}, /*retain_graph=*/true,
                                     /*create_graph=*/true, /*allow_unused=*/true);
      for (size_t j = 0; j < which.size(); ++j) result[which[j]] = g[j];
      return result;
    }
    auto [dq, dk, dv] = fused_feature_backward(grads[0], saved[0], saved[1], saved[2], y, den,
                                               keep, prefix, set.feature, set.angle_step,
                                               set.clamp, set.causal);
    result[0] = dq;
    result[1] = dk;
    result[2] = dv;
    return result;
  }
};

}  // namespace

bool fused_feature_applies(const at::Tensor& q, const at::Tensor& k, bool causal,
                           const c10::optional<at::Tensor>& key_padding_mask,
                           FeatureMapKind feature) {
  // favor's features need a projection, the trained maps' their weights
  if (feature == FeatureMapKind::Favor || is_learned(feature)) return false;
  const auto dtype = q.scalar_type();
  const bool masked = key_padding_mask.has_value() && key_padding_mask->defined();
  if (!(dtype == at::kFloat || dtype == at::kDouble) || !q.device().is_cpu()) return false;
  return causal ? q.size(2) == k.size(2) && !masked : true;
}

at::Tensor fused_feature_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const c10::optional<at::Tensor>& key_padding_mask,
                                   FeatureMapKind feature, double angle_step, bool clamp,
                                   bool causal) {
  return FusedFeatureAttention::apply(q, k, v, key_padding_mask, c10::optional<at::Tensor>(),
                                      static_cast<int64_t>(feature), angle_step, clamp, causal);
}

bool fused_prefix_feature_applies(const at::Tensor& q, FeatureMapKind feature) {
  if (feature == FeatureMapKind::Favor || is_learned(feature)) return false;
  const auto dtype = q.scalar_type();
  return (dtype == at::kFloat || dtype == at::kDouble) && q.device().is_cpu();
}

at::Tensor fused_prefix_feature_attention(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const at::Tensor& prefix_lengths,
                                          const c10::optional<at::Tensor>& key_padding_mask,
                                          FeatureMapKind feature, double angle_step, bool clamp) {
  const auto prefix = prefix_lengths.to(at::kLong).contiguous();
  return FusedFeatureAttention::apply(q, k, v, key_padding_mask, c10::optional<at::Tensor>(prefix),
                                      static_cast<int64_t>(feature), angle_step, clamp,
                                      /*causal=*/false);
}

}  // namespace attnkit::ops::detail
