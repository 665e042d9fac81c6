#pragma once
// int8 dense layers (`attnkit generate --compute-type int8`, `attnkit convert --quantize int8`).
//
// The scheme, in one place (its arithmetic in src/ops/cpu/int8_gemm_kernel.h):
// - weights: per output row, symmetric: scale_r = max_i |W[r, i]| / 127, W8[r, i] =
//   round-half-even(W[r, i] · 127 / max_i |W[r, i]|) ∈ [-127, 127]; quantized once.
// - activations: the same per input row, at every call (dynamic quantization).
// - product: y[m, r] = bias[r] + scale_r · xscale_m · Σ_i W8[r, i] · X8[m, i], the sum exact in
//   int32, one float rounding after it.
// Error of one output against the float product: |Σ_i (W·X − W8·X8·s)| ≤ Σ_i (|W| · sx/2 +
// |X| · sw/2 + sw · sx / 4) (a bound from the half-step rounding of both factors; the tests
// check it).
//
// A quantized torch::nn::Linear keeps its float `weight` parameter as an empty tensor (the memory
// goes) and gains two buffers, `weight_int8` [out, in] (int8) and `weight_scale` [out] (float),
// which a model's state holds and attnkit's format saves and loads like any buffer.
//
// For decoding, pack_int8_layers replaces `weight_int8` (then an empty tensor) by the layout of
// the panel kernels (AVX-512 VNNI and AVX2; src/ops/cpu/int8_gemm_kernel.h): buffers `weight_int8_panels`
// and `weight_int8_sums`: the same products to the bit, faster (docs/decoding.md, "Panels"). A
// packed model is for decoding only: saving one is refused.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class LinearImpl;
class Module;
}  // namespace torch::nn

namespace attnkit::layers {

// The arithmetic a model's dense layers run in. Bf16 is accepted as a request only: this build
// has no bf16 kernel, so it runs as Float32 after bf16_note().
enum class ComputeType { Float32, Int8, Bf16 };

// "float32" | "int8" | "bf16"; anything else: attnkit::Error naming the option and the accepted
// values.
ComputeType parse_compute_type(const std::string& text, const std::string& option);
const char* compute_type_name(ComputeType type);

// The one line `generate --compute-type bf16` prints: that it falls back to float32, and whether
// this CPU has AVX-512 BF16 (the ISA a bf16 kernel would need; AVX2-only machines do not).
std::string bf16_note();

struct Int8Weight {
  Int8Weight() = default;
  Int8Weight(at::Tensor values, at::Tensor scale) : values(std::move(values)), scale(std::move(scale)) {}
  Int8Weight(at::Tensor scale, at::Tensor packed, at::Tensor sums, int64_t in)
      : scale(std::move(scale)), packed(std::move(packed)), sums(std::move(sums)), packed_in(in) {}

  at::Tensor values;  // int8 [out, in], contiguous; undefined when packed
  at::Tensor scale;   // float [out]
  // Packed (pack_int8): int8 [panels · 16, groups · 4] in panel order (int8_gemm_kernel.h), the
  // correction sums int32 [out], and the row length `in` (not recoverable from the padded shape).
  at::Tensor packed;
  at::Tensor sums;
  int64_t packed_in = 0;
  bool defined() const { return values.defined() || packed.defined(); }
  bool is_packed() const { return packed.defined(); }
  int64_t out() const { return scale.numel(); }
  int64_t in() const { return is_packed() ? packed_in : values.size(1); }
};

// Per-row quantization of a float matrix [rows, in] (weights, or activations for the tests).
Int8Weight quantize_int8(const at::Tensor& matrix);
// values · scale per row, float [rows, in] (a packed weight is unpacked first).
at::Tensor dequantize_int8(const Int8Weight& w);
// The weight in panels (the row-major values are not kept); a packed weight as it is.
Int8Weight pack_int8(const Int8Weight& w);
// The row-major values of a packed weight (as quantize_int8 made them); others as they are.
Int8Weight unpack_int8(const Int8Weight& w);

// x [..., in] · Wᵀ + bias through the scheme above, any number of rows (bias may be undefined).
at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& w, const at::Tensor& bias);
// The same for several layers over one x (q, k and v of an attention): one parallel region.
std::vector<at::Tensor> int8_linear(const at::Tensor& x, const std::vector<Int8Weight>& weights,
                                    const std::vector<at::Tensor>& biases);

// The int8 weight of a quantized layer; undefined for a float one.
Int8Weight int8_weight(const torch::nn::LinearImpl& layer);

// x · Wᵀ + b of a layer, quantized or not (the float path is dense_linear: at::linear, as
// layer.forward, where a gradient is needed; one GEMM of the kernels' library where none is).
at::Tensor linear(const torch::nn::LinearImpl& layer, const at::Tensor& x);

// Quantizes the dense layers of every attention (q, k, v, o) and feed-forward block (gate, fc_in,
// fc_out) under `module` (itself included) in place; layers already quantized are left alone.
// Other torch::nn::Linear modules (poolers, task heads, embedding projections) stay float. With values = false only the buffers' shapes are made (zeros), for a
// model whose int8 state is loaded next. Returns the number of layers quantized.
int64_t quantize_linears(torch::nn::Module& module, bool values = true);

// Whether any layer under `module` is quantized.
bool has_int8_layers(const torch::nn::Module& module);

// For decoding on this process: every quantized dense layer under `module` (as quantize_linears
// finds them) packed (pack_int8), where ops::cpu::int8_panels_preferred says the panel kernel
// runs (the AVX-512 or AVX2 kernel copies; not the baseline copy); elsewhere nothing. Idempotent. Returns the
// number of layers packed.
int64_t pack_int8_layers(torch::nn::Module& module);

// Whether any buffer under `module` holds packed int8 panels (such a model is not saved).
bool has_packed_int8(const torch::nn::Module& module);

// The int8 weight `owner` holds as its own buffers `values_name` (row-major int8) and
// `scale_name`, or, once stored packed, as the panels and sums beside them; `in` is the weight's
// row length (a packed weight's padded shape does not give it). Undefined when they are absent.
// (int8_weight is this for a layer; models/quantize.cpp's LM head too.)
Int8Weight int8_buffers(const torch::nn::Module& owner, const std::string& values_name,
                        const std::string& scale_name, int64_t in);
// Stores `packed` (pack_int8 of owner's `values_name` weight) as buffers VALUES_panels and
// VALUES_sums beside it and empties the row-major tensor, for every module that holds it.
void store_packed(torch::nn::Module& owner, const std::string& values_name, const Int8Weight& packed);

}  // namespace attnkit::layers
