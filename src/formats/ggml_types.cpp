// ggml tensor types and their conversion to float32 (include/attnkit/formats/ggml_types.h). Each
// conversion reads its block layout as ggml-common.h defines it and computes in the order of the
// `gguf` package's dequantize_blocks (gguf/quants.py), one float32 rounding per operation.
#include "attnkit/formats/ggml_types.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <string>

namespace attnkit::formats {
namespace {

constexpr size_t kSuperBlock = 256;  // QK_K: values per block of the K types

template <typename T>
T load(const uint8_t* p) {  // little-endian, any alignment
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

float load_half(const uint8_t* p) { return half_to_float(load<uint16_t>(p)); }

// ---- plain types ----------------------------------------------------------------------------

void dequantize_f32(const uint8_t* data, float* out, size_t blocks) {
  std::memcpy(out, data, blocks * sizeof(float));
}

void dequantize_f16(const uint8_t* data, float* out, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i) out[i] = load_half(data + 2 * i);
}

void dequantize_bf16(const uint8_t* data, float* out, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i) {
    const uint32_t bits = static_cast<uint32_t>(load<uint16_t>(data + 2 * i)) << 16;
    std::memcpy(out + i, &bits, sizeof(float));
  }
}

// F64 and the integer types: numpy's astype(float32), a rounding to nearest.
template <typename T>
void dequantize_cast(const uint8_t* data, float* out, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i) out[i] = static_cast<float>(load<T>(data + sizeof(T) * i));
}

// ---- 32-value blocks ------------------------------------------------------------------------

// block_q4_0: half d; uint8 qs[16] (value j in the low nibble of qs[j], value j + 16 in the high).
void dequantize_q4_0(const uint8_t* data, float* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, data += 18, out += 32) {
    const float d = load_half(data);
    const uint8_t* qs = data + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
      out[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

// block_q4_1: half d, m; uint8 qs[16]; value = d * q + m.
void dequantize_q4_1(const uint8_t* data, float* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, data += 20, out += 32) {
    const float d = load_half(data);
    const float m = load_half(data + 2);
    const uint8_t* qs = data + 4;
    for (int j = 0; j < 16; ++j) {
      out[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
      out[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

// The 5-bit values of a Q5_0/Q5_1 block: nibbles as Q4, the fifth bit of value j is bit j of qh.
void five_bit_values(const uint8_t* qh_bytes, const uint8_t* qs, int values[32]) {
  const uint32_t qh = load<uint32_t>(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    values[j] = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    values[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

// block_q5_0: half d; uint8 qh[4]; uint8 qs[16]; value = d * (q - 16).
void dequantize_q5_0(const uint8_t* data, float* out, size_t blocks) {
  int q[32];
  for (size_t b = 0; b < blocks; ++b, data += 22, out += 32) {
    const float d = load_half(data);
    five_bit_values(data + 2, data + 6, q);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(q[j] - 16);
  }
}

// block_q5_1: half d, m; uint8 qh[4]; uint8 qs[16]; value = d * q + m.
void dequantize_q5_1(const uint8_t* data, float* out, size_t blocks) {
  int q[32];
  for (size_t b = 0; b < blocks; ++b, data += 24, out += 32) {
    const float d = load_half(data);
    const float m = load_half(data + 2);
    five_bit_values(data + 4, data + 8, q);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(q[j]) + m;
  }
}

// block_q8_0: half d; int8 qs[32]; value = q * d.
void dequantize_q8_0(const uint8_t* data, float* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, data += 34, out += 32) {
    const float d = load_half(data);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(data[2 + j])) * d;
  }
}

// ---- 256-value super-blocks (the K types) ---------------------------------------------------

// block_q2_K: uint8 scales[16] (low nibble: scale, high: min of each 16 values); uint8 qs[64]
// (2 bits; value e of each half of 128 sits in qs[32 * half + e % 32] at bit 2 * (e % 128 / 32));
// half d, dmin; value = (d * scale) * q - dmin * min.
void dequantize_q2_k(const uint8_t* data, float* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, data += 84, out += kSuperBlock) {
    const uint8_t* scales = data;
    const uint8_t* qs = data + 16;
    const float d = load_half(data + 80);
    const float dmin = load_half(data + 82);
    for (size_t e = 0; e < kSuperBlock; ++e) {
      const uint8_t sc = scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0x0F);
      const float ml = dmin * static_cast<float>(sc >> 4);
      const int q = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
      out[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

// block_q3_K: uint8 hmask[32] (bit e / 32 of hmask[e % 32] clear: subtract 4); uint8 qs[64] (low
// 2 bits, as Q2_K); uint8 scales[12] (16 6-bit scales, offset by 32); half d.
void dequantize_q3_k(const uint8_t* data, float* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, data += 110, out += kSuperBlock) {
    const uint8_t* hmask = data;
    const uint8_t* qs = data + 32;
    const uint8_t* packed = data + 96;
    const float d = load_half(data + 108);
    float dl[16];
    for (int i = 0; i < 16; ++i) {
      const int low = (i < 8 ? packed[i] : packed[i - 8] >> 4) & 0x0F;
      const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 0x03;
      dl[i] = d * static_cast<float>(static_cast<int8_t>(low | (high << 4)) - 32);
    }
    for (size_t e = 0; e < kSuperBlock; ++e) {
      const int low = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
      const int high_clear = ((hmask[e % 32] >> (e / 32)) & 1) ^ 1;
      out[e] = dl[e / 16] * static_cast<float>(low - (high_clear << 2));
    }
  }
}

// The 8 6-bit scales and mins of Q4_K and Q5_K, packed in 12 bytes (get_scale_min_k4).
void scales_and_mins(const uint8_t* packed, int scale[8], int min[8]) {
  for (int j = 0; j < 4; ++j) {
    scale[j] = packed[j] & 0x3F;
    min[j] = packed[j + 4] & 0x3F;
    scale[j + 4] = (packed[j + 8] & 0x0F) | ((packed[j] >> 2) & 0x30);
    min[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 2) & 0x30);
  }
}

// block_q4_K: half d, dmin; uint8 scales[12]; uint8 qs[128] (sub-block s of 32 values: the low
// nibbles of qs[32 * (s / 2) ...] for even s, the high ones for odd s);
// value = (d * scale) * q - dmin * min.
// block_q5_K (kFifthBit): as Q4_K with uint8 qh[32] between scales and qs: bit s of qh[l] is the
// fifth bit of value l of sub-block s.
template <bool kFifthBit>
void dequantize_q4_k_q5_k(const uint8_t* data, float* out, size_t blocks) {
  constexpr size_t kBlockBytes = kFifthBit ? 176 : 144;
  int scale[8], min[8];
  for (size_t b = 0; b < blocks; ++b, data += kBlockBytes, out += kSuperBlock) {
    const float d = load_half(data);
    const float dmin = load_half(data + 2);
    scales_and_mins(data + 4, scale, min);
    const uint8_t* qh = data + 16;  // Q5_K only
    const uint8_t* qs = data + (kFifthBit ? 48 : 16);
    for (int s = 0; s < 8; ++s) {
      const float ds = d * static_cast<float>(scale[s]);
      const float ms = dmin * static_cast<float>(min[s]);
      for (int l = 0; l < 32; ++l) {
        int q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0F;
        if constexpr (kFifthBit) q |= ((qh[l] >> s) & 1) << 4;
        out[32 * s + l] = ds * static_cast<float>(q) - ms;
      }
    }
  }
}

// block_q6_K: uint8 ql[128] (low 4 bits: value e of half h = e / 128 in ql[64 * h + e % 64],
// nibble e % 128 / 64); uint8 qh[64] (high 2 bits in qh[32 * h + e % 32] at bit
// 2 * (e % 128 / 32)); int8 scales[16]; half d; value = (d * scale) * (q - 32).
void dequantize_q6_k(const uint8_t* data, float* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, data += 210, out += kSuperBlock) {
    const uint8_t* ql = data;
    const uint8_t* qh = data + 128;
    const uint8_t* scales = data + 192;
    const float d = load_half(data + 208);
    for (size_t e = 0; e < kSuperBlock; ++e) {
      const size_t h = e / 128, r = e % 128;
      const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
      const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
      const float ds = d * static_cast<float>(static_cast<int8_t>(scales[e / 16]));
      out[e] = ds * static_cast<float>((low | (high << 4)) - 32);
    }
  }
}

// block_q8_K: float d; int8 qs[256]; int16 bsums[16] (sums for dot products, unused here);
// value = d * q, as ggml's dequantize_row_q8_K (the gguf package has no Q8_K).
void dequantize_q8_k(const uint8_t* data, float* out, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, data += 292, out += kSuperBlock) {
    const float d = load<float>(data);
    for (size_t e = 0; e < kSuperBlock; ++e)
      out[e] = d * static_cast<float>(static_cast<int8_t>(data[4 + e]));
  }
}

// Every type ggml numbers (ggml.h, gguf/constants.py's GGML_QUANT_SIZES), in number order.
constexpr std::array<GgmlTypeTraits, 34> kTypes = {{
    {GgmlType::F32, "F32", 1, 4, dequantize_f32},
    {GgmlType::F16, "F16", 1, 2, dequantize_f16},
    {GgmlType::Q4_0, "Q4_0", 32, 18, dequantize_q4_0},
    {GgmlType::Q4_1, "Q4_1", 32, 20, dequantize_q4_1},
    {GgmlType::Q5_0, "Q5_0", 32, 22, dequantize_q5_0},
    {GgmlType::Q5_1, "Q5_1", 32, 24, dequantize_q5_1},
    {GgmlType::Q8_0, "Q8_0", 32, 34, dequantize_q8_0},
    {GgmlType::Q8_1, "Q8_1", 32, 40, nullptr},
    {GgmlType::Q2_K, "Q2_K", 256, 84, dequantize_q2_k},
    {GgmlType::Q3_K, "Q3_K", 256, 110, dequantize_q3_k},
    {GgmlType::Q4_K, "Q4_K", 256, 144, dequantize_q4_k_q5_k<false>},
    {GgmlType::Q5_K, "Q5_K", 256, 176, dequantize_q4_k_q5_k<true>},
    {GgmlType::Q6_K, "Q6_K", 256, 210, dequantize_q6_k},
    {GgmlType::Q8_K, "Q8_K", 256, 292, dequantize_q8_k},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, nullptr},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, nullptr},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, nullptr},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50, nullptr},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, nullptr},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110, nullptr},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82, nullptr},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, nullptr},
    {GgmlType::I8, "I8", 1, 1, dequantize_cast<int8_t>},
    {GgmlType::I16, "I16", 1, 2, dequantize_cast<int16_t>},
    {GgmlType::I32, "I32", 1, 4, dequantize_cast<int32_t>},
    {GgmlType::I64, "I64", 1, 8, dequantize_cast<int64_t>},
    {GgmlType::F64, "F64", 1, 8, dequantize_cast<double>},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56, nullptr},
    {GgmlType::BF16, "BF16", 1, 2, dequantize_bf16},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54, nullptr},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66, nullptr},
    {GgmlType::MXFP4, "MXFP4", 32, 17, nullptr},
    {GgmlType::NVFP4, "NVFP4", 64, 36, nullptr},
    {GgmlType::Q1_0, "Q1_0", 128, 18, nullptr},
}};

std::string supported_names() {
  std::string names;
  for (const GgmlTypeTraits& traits : kTypes) {
    if (traits.dequantize == nullptr) continue;
    if (!names.empty()) names += ", ";
    names += traits.name;
  }
  return names;
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // infinity, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&bits, &magnitude, sizeof(bits));
    bits |= sign;
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

const GgmlTypeTraits* find_ggml_type(uint32_t id) {
  for (const GgmlTypeTraits& traits : kTypes)
    if (static_cast<uint32_t>(traits.type) == id) return &traits;
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeTraits* traits = find_ggml_type(id);
  return traits != nullptr ? std::string(traits->name) : fmt::format("type {}", id);
}

void dequantize(uint32_t id, const uint8_t* data, size_t elements, float* out,
                const std::string& what) {
  const GgmlTypeTraits* traits = find_ggml_type(id);
  if (traits == nullptr || traits->dequantize == nullptr)
    throw Error(fmt::format("cannot convert {}: ggml type {} is not supported (supported: {})",
                            what, ggml_type_name(id), supported_names()));
  if (elements % traits->block_size != 0)
    throw Error(fmt::format("{}: {} elements are not a whole number of {} blocks of {}", what,
                            elements, traits->name, traits->block_size));
  if (elements == 0) return;  // a tensor with a dimension 0: `out` may be null
  traits->dequantize(data, out, elements / traits->block_size);
}

}  // namespace attnkit::formats
