#pragma once
// ggml's tensor types, numbered as GGUF files store them (ggml.h's enum ggml_type), and their
// conversion to float32. No LibTorch.
//
// A tensor of a block type is a sequence of blocks, each holding `block_size` values in
// `block_bytes` bytes; GGUF stores rows along the first dimension, whose size is a multiple of
// the block size. The conversions follow the `gguf` Python package's gguf.quants.dequantize
// (0.19.0), the reference of tests/python/test_gguf_dequantize.py, bit for bit: every product
// and sum is one float32 operation in the package's order (units of this layer are compiled
// with -ffp-contract=off, so no fused multiply-add changes a rounding).
#include <cstddef>
#include <cstdint>
#include <string>

namespace attnkit::formats {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

// Converts `blocks` whole blocks at `data` to blocks * block_size floats at `out`.
using DequantizeBlocks = void (*)(const uint8_t* data, float* out, size_t blocks);

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;      // as ggml and the gguf package spell it: "Q4_K"
  uint32_t block_size;   // values per block (1 for F32, F16, BF16, ...)
  uint32_t block_bytes;  // bytes per block
  // null for a type attnkit does not convert (the IQ*, TQ*, Q8_1, MXFP4, NVFP4 and Q1_0 types)
  DequantizeBlocks dequantize;
};

// The traits of type number `id`, or null for a number ggml does not (or no longer) use.
const GgmlTypeTraits* find_ggml_type(uint32_t id);

// "Q4_K", or "type 99" for an unknown number.
std::string ggml_type_name(uint32_t id);

// Converts `elements` values of type `id` at `data` (elements / block_size * block_bytes bytes)
// to float32 at `out`. Throws attnkit::Error "cannot convert WHAT: ggml type NAME is not
// supported (supported: ...)" for a type without a conversion, and "WHAT: N elements are not a
// whole number of NAME blocks of B" otherwise. `what` names the tensor in the message.
void dequantize(uint32_t id, const uint8_t* data, size_t elements, float* out,
                const std::string& what);

// IEEE half (binary16) to float, exact (subnormals, infinities, NaN payloads kept).
float half_to_float(uint16_t bits);

}  // namespace attnkit::formats
