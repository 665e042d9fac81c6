#pragma once
// GGUF files written byte by byte for the formats tests: little-endian scalars, strings, metadata
// records, arrays, tensor infos and a whole file (header, metadata, tensor infos, padding, data).
#include "attnkit/formats/ggml_types.h"
#include "attnkit/formats/gguf.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::formats::gguf_bytes {

inline std::string u8(uint8_t v) { return std::string(1, static_cast<char>(v)); }
template <typename T>
std::string le(T v) {
  std::string bytes(sizeof(T), '\0');
  std::memcpy(bytes.data(), &v, sizeof(T));
  return bytes;
}
inline std::string u32(uint32_t v) { return le(v); }
inline std::string u64(uint64_t v) { return le(v); }
inline std::string str(std::string_view s) { return u64(s.size()) + std::string(s); }
inline std::string type(GgufType t) { return u32(static_cast<uint32_t>(t)); }

inline std::string kv(std::string_view key, GgufType t, const std::string& payload) {
  return str(key) + type(t) + payload;
}
inline std::string array(GgufType element, uint64_t count, const std::string& payload) {
  return type(element) + u64(count) + payload;
}
inline std::string tensor_info(std::string_view name, const std::vector<uint64_t>& dims, GgmlType t,
                               uint64_t offset) {
  std::string bytes = str(name) + u32(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) bytes += u64(d);
  return bytes + u32(static_cast<uint32_t>(t)) + u64(offset);
}

struct FileParts {
  uint32_t version = 3;
  std::vector<std::string> metadata;
  std::vector<std::string> tensors;
  std::string data;
  uint64_t alignment = 32;
};

inline std::string gguf(const FileParts& parts) {
  std::string bytes = "GGUF" + u32(parts.version) + u64(parts.tensors.size()) + u64(parts.metadata.size());
  for (const std::string& m : parts.metadata) bytes += m;
  for (const std::string& t : parts.tensors) bytes += t;
  bytes.resize((bytes.size() + parts.alignment - 1) / parts.alignment * parts.alignment, '\0');
  return bytes + parts.data;
}

inline std::string floats(const std::vector<float>& values) {
  std::string bytes;
  for (float v : values) bytes += le(v);
  return bytes;
}

}  // namespace attnkit::formats::gguf_bytes
