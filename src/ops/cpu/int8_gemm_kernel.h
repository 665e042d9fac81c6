#pragma once
// int8 dense layers for decoding (`generate --compute-type int8`): the arithmetic of the scheme
// include/attnkit/layers/int8_linear.h describes, without LibTorch.
//
// Quantization, per row, symmetric: scale = max_i |x_i| / 127 and q_i = round-half-even(x_i · 127
// / max_i |x_i|), so q_i ∈ [-127, 127] (never -128) and |x_i - q_i · scale| ≤ scale / 2 up to the
// float rounding of the product; a row of zeros has scale 0 and q = 0. Weights are quantized once
// with one scale per output row, activations at every call with one scale per input row.
//
// Product: Y[m, r] = bias[r] + (wscale[r] · xscale[m]) · Σ_i W[r, i] · X[m, i], the sum an exact
// int32 (|Σ| ≤ in · 127², so in ≤ kInt8MaxIn), rounded to float once. Compiled with runtime
// dispatch (kernel_isa.h): the AVX-512 copy runs vpdpbusd where the CPU has AVX-512 VNNI (Ice
// Lake, Zen 4 and later) and the AVX2 copy otherwise; the AVX2 copy sign-extends to 16 bits for
// vpmaddwd; the baseline copy is the plain loop. Every copy gives the same bits.
#include <cstdint>

namespace attnkit::ops::cpu {

constexpr int kInt8Levels = 127;
// The longest row whose int32 sum cannot overflow: 2^31 / 127².
constexpr int64_t kInt8MaxIn = 133144;

// X [rows, in] (leading dimension ldx) -> Q [rows, in] (contiguous), scale [rows].
void quantize_rows_int8(const float* X, int64_t ldx, int64_t rows, int64_t in, int8_t* Q,
                        float* scale);

// W [out, in] int8 (contiguous), wscale [out]; X [M, in] int8 (contiguous), xscale [M]; bias
// [out] or null; Y [M, out] with leading dimension ldy; output rows [row_begin, row_end).
void gemm_int8_rows(const int8_t* W, int64_t in, const float* wscale, const int8_t* X,
                    const float* xscale, int64_t M, const float* bias, float* Y, int64_t ldy,
                    int64_t row_begin, int64_t row_end);

}  // namespace attnkit::ops::cpu
