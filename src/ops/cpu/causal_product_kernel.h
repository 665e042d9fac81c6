#pragma once
// Causal product, the prefix-sum primitive of feature-map attention on explicit features
// (src/ops/feature_attention.cpp, e.g. FAVOR, which has no fused kernel):
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

}  // namespace attnkit::ops::cpu
