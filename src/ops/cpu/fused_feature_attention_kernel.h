#pragma once
// The fused CPU kernels of feature-map attention (linear attention with elu + 1 or relu, and
// cosFormer): the feature map is applied inside chunked kernels, so neither φ(q), φ(k) nor the
// augmented values exist as tensors. The differentiable op over them is
// src/ops/fused_feature_attention.h. No LibTorch here: plain pointers, compiled with runtime
// dispatch to AVX-512 / AVX2 / baseline copies (kernel_isa.h).
#include "attnkit/attention_kind.h"

#include <cstddef>
#include <cstdint>

namespace attnkit::ops::cpu {

// Fused causal feature attention, the whole of causal linear attention and causal cosFormer for
// one sequence (L = S = n, no padding):
//   y_t = Σ_{s<=t} (φq_t·φk_s) v_s / D_t,   D_t = Σ_{s<=t} φq_t·φk_s + eps  (or max(·, eps))
// with the feature map applied inside the kernel, chunk by chunk, so neither φ(q), φ(k) nor the
// augmented values exist as tensors. The forward keeps only the raw denominators (n values); the
// backward recomputes the features and runs two chunked passes: forward in time for dq, reversed
// for dk and dv. State per pass: one [m × e] matrix and one m-vector. Chunk products go to BLAS
// (single-threaded: the caller parallelises over sequences).
constexpr int64_t kFeatureChunk = 64;

struct FeatureProblem {
  int64_t n = 0, d = 0, e = 0;  // sequence length, q/k size, value size
  // Elu: elu(x) + 1 (m = d); Relu: relu(x) (m = d); CosRelu: [relu(x) cos a_t, relu(x) sin a_t]
  // with a_t = (t + 1)·angle_step (m = 2d). Favor has no fused kernel (it is never passed here).
  FeatureMapKind feature = FeatureMapKind::Elu;
  double angle_step = 0.0;      // CosRelu only: π / (2M)
  bool clamp = false;           // D = max(raw, eps) (cosFormer) instead of raw + eps
  double eps = 1e-6;
  int64_t features() const { return feature == FeatureMapKind::CosRelu ? 2 * d : d; }
};

// Elements of scratch memory one call (forward or backward) needs.
size_t feature_attention_workspace(const FeatureProblem& p);

// q, k [n × d], v [n × e] -> y [n × e] and the raw denominators den [n] (before eps).
void causal_feature_attention_forward(const FeatureProblem& p, const float* q, const float* k,
                                      const float* v, float* y, float* den, float* workspace);
void causal_feature_attention_forward(const FeatureProblem& p, const double* q, const double* k,
                                      const double* v, double* y, double* den, double* workspace);

// From the forward's y and den and the output gradient g [n × e]: dq, dk [n × d], dv [n × e]
// (overwritten).
void causal_feature_attention_backward(const FeatureProblem& p, const float* q, const float* k,
                                       const float* v, const float* y, const float* den,
                                       const float* g, float* dq, float* dk, float* dv,
                                       float* workspace);
void causal_feature_attention_backward(const FeatureProblem& p, const double* q, const double* k,
                                       const double* v, const double* y, const double* den,
                                       const double* g, double* dq, double* dk, double* dv,
                                       double* workspace);

// Non-causal feature attention, L queries over S keys (any L, S; cosFormer angles from position
// 1 on both sides): y_t = φq_t·(Σ_s φk_s v_sᵀ) / D_t with D_t from φq_t·Σ_s φk_s. Keys whose
// `keep` entry is false (key padding) contribute nothing; keep = nullptr keeps all. p.n is L.
// Memory: the same chunk workspace (non_causal_workspace elements).
size_t non_causal_workspace(const FeatureProblem& p);
void feature_attention_forward(const FeatureProblem& p, int64_t S, const float* q, const float* k,
                               const float* v, const bool* keep, float* y, float* den,
                               float* workspace);
void feature_attention_forward(const FeatureProblem& p, int64_t S, const double* q,
                               const double* k, const double* v, const bool* keep, double* y,
                               double* den, double* workspace);
void feature_attention_backward(const FeatureProblem& p, int64_t S, const float* q,
                                const float* k, const float* v, const bool* keep, const float* y,
                                const float* den, const float* g, float* dq, float* dk,
                                float* dv, float* workspace);
void feature_attention_backward(const FeatureProblem& p, int64_t S, const double* q,
                                const double* k, const double* v, const bool* keep,
                                const double* y, const double* den, const double* g, double* dq,
                                double* dk, double* dv, double* workspace);

// Prefix-LM feature attention over one sequence (L = S = p.n), the O(n) form of the
// prefix-LM / UniLM mask: with prefix length P (0 <= P <= n), query t < P sees the keys s < P
// (bidirectional over the prefix) and query t >= P sees the keys s < P and P..t (the prefix
// summary Σ_{s<P} φk_s v_sᵀ, Σ_{s<P} φk_s plus a causal running sum). Keys whose `keep` entry is
// false (padding) contribute nothing; keep = nullptr keeps all. P = 0 is causal attention,
// P = n non-causal. cosFormer angles from position 1 on both sides. Same y / den / gradient
// contract as the causal kernels; prefix_workspace elements of scratch.
size_t prefix_workspace(const FeatureProblem& p);
void prefix_feature_attention_forward(const FeatureProblem& p, int64_t P, const float* q,
                                      const float* k, const float* v, const bool* keep, float* y,
                                      float* den, float* workspace);
void prefix_feature_attention_forward(const FeatureProblem& p, int64_t P, const double* q,
                                      const double* k, const double* v, const bool* keep,
                                      double* y, double* den, double* workspace);
void prefix_feature_attention_backward(const FeatureProblem& p, int64_t P, const float* q,
                                       const float* k, const float* v, const bool* keep,
                                       const float* y, const float* den, const float* g,
                                       float* dq, float* dk, float* dv, float* workspace);
void prefix_feature_attention_backward(const FeatureProblem& p, int64_t P, const double* q,
                                       const double* k, const double* v, const bool* keep,
                                       const double* y, const double* den, const double* g,
                                       double* dq, double* dk, double* dv, double* workspace);

}  // namespace attnkit::ops::cpu
