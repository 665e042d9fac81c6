#pragma once
// Fused causal product, the heart of causal linear attention and causal cosFormer:
//   Y[t] = Σ_{s <= t} (Q[t]·K[s]) V[s]        (reverse = false)
//   Y[t] = Σ_{s >= t} (Q[t]·K[s]) V[s]        (reverse = true)
// for one sequence, Q and K [n, m], V and Y [n, e], row-major and contiguous. Computed in chunks
// of kCausalChunk rows: a small masked product inside the chunk and a running [m, e] state across
// chunks, so memory is O(m·e + chunk²) whatever n is. No LibTorch here: plain pointers, compiled
// with runtime dispatch to AVX-512 / AVX2 / baseline copies (kernel_isa.h).
#include <cstddef>
#include <cstdint>

namespace attnkit::ops::cpu {

constexpr int64_t kCausalChunk = 64;

// Elements of scratch memory causal_product needs for feature size m and value size e.
size_t causal_product_workspace(int64_t m, int64_t e);

void causal_product(const float* Q, const float* K, const float* V, float* Y, int64_t n, int64_t m,
                    int64_t e, bool reverse, float* workspace);
void causal_product(const double* Q, const double* K, const double* V, double* Y, int64_t n,
                    int64_t m, int64_t e, bool reverse, double* workspace);

// Fused causal feature attention, the whole of causal linear attention and causal cosFormer for
// one sequence (L = S = n, no padding):
//   y_t = Σ_{s<=t} (φq_t·φk_s) v_s / D_t,   D_t = Σ_{s<=t} φq_t·φk_s + eps  (or max(·, eps))
// with the feature map applied inside the kernel, chunk by chunk, so neither φ(q), φ(k) nor the
// augmented values exist as tensors. The forward keeps only the raw denominators (n values); the
// backward recomputes the features and runs two chunked passes: forward in time for dq, reversed
// for dk and dv. State per pass: one [m × e] matrix and one m-vector. Chunk products go to BLAS
// (single-threaded: the caller parallelises over sequences).
enum class FeatureKind {
  Elu,      // φ(x) = elu(x) + 1,                        m = d
  Relu,     // φ(x) = relu(x),                           m = d
  CosRelu,  // φ(x)_t = [relu(x) cos a_t, relu(x) sin a_t], a_t = (t + 1)·angle_step, m = 2d
};

constexpr int64_t kFeatureChunk = 64;

struct FeatureProblem {
  int64_t n = 0, d = 0, e = 0;  // sequence length, q/k size, value size
  FeatureKind feature = FeatureKind::Elu;
  double angle_step = 0.0;      // CosRelu only: π / (2M)
  bool clamp = false;           // D = max(raw, eps) (cosFormer) instead of raw + eps
  double eps = 1e-6;
  int64_t features() const { return feature == FeatureKind::CosRelu ? 2 * d : d; }
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

}  // namespace attnkit::ops::cpu
