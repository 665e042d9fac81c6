#pragma once
// Element-wise activations of the fused decoding step (layers/fused_step.cpp), in place, as loops
// GCC vectorises (one copy per instruction set, kernel_isa.h). Both are v · σ(a·z) with
// σ(t) = 1 / (1 + e^−t) — 0.5·(1 + tanh z) = σ(2z) — on vector_math.h's exp (relative error
// ~1e-7): glibc's tanhf / expf are scalar calls, a tenth of a tiny GPT-2's decoding step (perf).
// No LibTorch.
#include <cstdint>

namespace attnkit::ops::cpu {

// GPT-2's gelu_new: 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))).
void gelu_tanh_in_place(float* x, int64_t n);
// SiLU (swish): v·σ(v).
void silu_in_place(float* x, int64_t n);

}  // namespace attnkit::ops::cpu
