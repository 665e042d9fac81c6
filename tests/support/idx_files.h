#pragma once
// IDX files (MNIST layout) for tests: the bytes of an IDX array, and a gzip member written with
// stored (uncompressed) deflate blocks, so readers meet real gzip framing without a zlib here.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::testing {

// Big-endian magic (0x801 labels, 0x803 images), one uint32 per dimension, then the values.
inline std::string idx_bytes(uint32_t magic, const std::vector<uint32_t>& shape, const std::vector<uint8_t>& values) {
  std::string out;
  auto put = [&](uint32_t v) {
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  put(magic);
  for (uint32_t d : shape) put(d);
  out.append(values.begin(), values.end());
  return out;
}

inline uint32_t crc32_of(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline std::string gzip_stored(const std::string& data) {
  std::string out = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, 0, 3};  // deflate, no flags, Unix
  auto put_le32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(65535, data.size() - at);
    out.push_back(at + n == data.size() ? 1 : 0);  // BFINAL, BTYPE 00 (stored)
    out.push_back(static_cast<char>(n & 0xFF));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(~n & 0xFF));
    out.push_back(static_cast<char>((~n >> 8) & 0xFF));
    out.append(data, at, n);
    at += n;
  } while (at < data.size());
  put_le32(crc32_of(data));
  put_le32(static_cast<uint32_t>(data.size()));
  return out;
}

}  // namespace attnkit::testing
