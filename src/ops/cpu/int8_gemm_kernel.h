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

// Panels: W in the layout of the panel kernels (AVX-512 VNNI and AVX2), for decoding (a layer's row-major
// int8 weight is replaced by it after loading; layers/int8_linear.h, pack_int8). Panel p holds
// output rows 16p.. 16p + 15; for each group g of 4 input values, 64 bytes: row r's
// W[16p + r, 4g.. 4g + 3] at bytes 4r.. 4r + 3 (zeros past `out` and past `in`). One vpdpbusd
// multiplies these 64 bytes by one row's 4 activation bytes broadcast, adding into the 16 rows'
// int32 sums: no horizontal reduction, and every X row of a block reuses the panel's loads.
// Activations enter offset to unsigned bytes (u = x + 128, vpdpbusd's unsigned operand), and
// each row's sum is corrected by sums[r] = 128 · Σ_i W[r, i], computed when packing: the
// corrected sums are the exact int32 sums of the row kernels, so the panel kernels give their
// bits (|Σ u · w| ≤ groups · 4 · 255 · 127 < 2^31: groups · 4 ≤ kInt8PanelMaxIn).
constexpr int64_t kInt8PanelRows = 16;
constexpr int64_t kInt8PanelMaxIn = (int64_t(1) << 31) / (255 * 127) - 64;
inline int64_t int8_panel_groups(int64_t in) { return (in + 3) / 4; }
inline int64_t int8_panel_count(int64_t out) { return (out + kInt8PanelRows - 1) / kInt8PanelRows; }
// Bytes of the panels of an [out, in] weight: panels · groups · 64.
inline int64_t int8_panel_bytes(int64_t out, int64_t in) {
  return int8_panel_count(out) * int8_panel_groups(in) * 4 * kInt8PanelRows;
}

// Whether layers should be packed into panels on this process: the kernels run their AVX-512 or
// AVX2 copy (kernel_isa.h), and in ≤ kInt8PanelMaxIn. (With the baseline copy the row kernels'
// plain loop is faster than the panels'.)
bool int8_panels_preferred(int64_t in);

// W [out, in] (contiguous) -> panels [panel_begin, panel_end) of `packed` (int8_panel_bytes in
// all) and sums [out] for the rows of those panels.
void pack_int8_panels(const int8_t* W, int64_t out, int64_t in, int8_t* packed, int32_t* sums,
                      int64_t panel_begin, int64_t panel_end);
// The inverse: panels -> W [out, in].
void unpack_int8_panels(const int8_t* packed, int64_t out, int64_t in, int8_t* W);

// X [rows, in] int8 -> U [rows, groups · 4] uint8, u = x + 128 (the padding 128: it meets zero
// weights).
void offset_rows_uint8(const int8_t* X, int64_t rows, int64_t in, uint8_t* U);

// Y[m, r] = float(Σ_i W[r, i] · X[m, i]) · (wscale[r] · xscale[m]) (+ bias[r]), as
// gemm_int8_rows, for the output rows of panels [panel_begin, panel_end); U from
// offset_rows_uint8. The VNNI copy where the kernels run their AVX-512 copy on a CPU with AVX-512
// VNNI; the AVX2 copy (vpsignb, vpmaddubsw on |x|, vpmaddwd: exact int32 sums without the
// correction) where they run AVX2, or AVX-512 without VNNI; else a plain loop. All give the same
// bits (what `make test-isa` checks).
void gemm_int8_panels(const int8_t* packed, const int32_t* sums, int64_t out, int64_t in,
                      const float* wscale, const uint8_t* U, const float* xscale, int64_t M,
                      const float* bias, float* Y, int64_t ldy, int64_t panel_begin,
                      int64_t panel_end);

}  // namespace attnkit::ops::cpu
