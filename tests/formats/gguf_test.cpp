// The GGUF reader (include/attnkit/formats/gguf.h) on files made byte by byte here: a small valid
// file read back value by value, then hostile ones (truncated at every byte, giant counts and
// lengths, offsets past the end or misaligned, bad magic and versions, deep arrays), each of which
// must give one attnkit::Error line naming the file and what is wrong. The conversions of every
// type against the gguf package are in tests/python/test_gguf.py; here, hand-made blocks.
#include "attnkit/error.h"
#include "attnkit/formats/ggml_types.h"
#include "attnkit/formats/gguf.h"
#include "attnkit/formats/gguf_dump.h"
#include "gguf_bytes.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace attnkit::formats {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::scratch_directory;
using testing::write_bytes;

using namespace gguf_bytes;

// A file with every metadata type, an array of arrays and three tensors (F32 [3, 2] = 24 bytes at
// 0, Q8_0 [32] = 34 bytes at 32, F16 [4] = 8 bytes at 96, ending the file).
FileParts valid_parts() {
  FileParts parts;
  parts.metadata = {
      kv("general.architecture", GgufType::STRING, str("llama")),
      kv("u8", GgufType::UINT8, u8(200)),
      kv("i8", GgufType::INT8, u8(0xFE)),
      kv("u16", GgufType::UINT16, le<uint16_t>(65000)),
      kv("i16", GgufType::INT16, le<int16_t>(-300)),
      kv("u32", GgufType::UINT32, u32(4000000000u)),
      kv("i32", GgufType::INT32, le<int32_t>(-7)),
      kv("f32", GgufType::FLOAT32, le(0.25f)),
      kv("bool", GgufType::BOOL, u8(1)),
      kv("u64", GgufType::UINT64, u64(1ull << 40)),
      kv("i64", GgufType::INT64, le<int64_t>(-(1ll << 40))),
      kv("f64", GgufType::FLOAT64, le(-1.5)),
      kv("tokens", GgufType::ARRAY, array(GgufType::STRING, 3, str("a") + str("") + str("é\n"))),
      kv("ids", GgufType::ARRAY, array(GgufType::INT32, 2, le<int32_t>(5) + le<int32_t>(-6))),
      kv("scores", GgufType::ARRAY, array(GgufType::FLOAT32, 2, le(1.0f) + le(-2.0f))),
      kv("nested", GgufType::ARRAY,
         array(GgufType::ARRAY, 2,
               array(GgufType::UINT8, 2, u8(1) + u8(2)) + array(GgufType::UINT8, 1, u8(3)))),
  };
  std::string q8 = le<uint16_t>(0x3800);  // d = 0.5
  for (int j = 0; j < 32; ++j) q8 += u8(static_cast<uint8_t>(j - 16));
  parts.tensors = {tensor_info("a", {3, 2}, GgmlType::F32, 0),
                   tensor_info("b", {32}, GgmlType::Q8_0, 32),
                   tensor_info("c", {4}, GgmlType::F16, 96)};
  parts.data = floats({1, 2, 3, 4, 5, 6}) + std::string(8, '\0') + q8 + std::string(30, '\0') +
               le<uint16_t>(0x3C00) + le<uint16_t>(0xC000) + le<uint16_t>(0x0001) + le<uint16_t>(0x7C00);
  return parts;
}

// Opens `bytes` written to a file; returns the error message ("" when it opens).
std::string open_error(const fs::path& dir, const std::string& bytes, const char* name = "x.gguf") {
  const std::string path = write_bytes(dir / name, bytes);
  return error_of([&] { (void)GgufFile::open(path); });
}

void expect_error(const fs::path& dir, const std::string& bytes, const std::string& part) {
  const std::string path = (dir / "x.gguf").string();
  const std::string message = open_error(dir, bytes);
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(part), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// ---- a valid file ---------------------------------------------------------------------------

TEST(Gguf, ReadsEveryMetadataTypeAndTensor) {
  const fs::path dir = scratch_directory("formats");
  const std::string path = write_bytes(dir / "valid.gguf", gguf(valid_parts()));
  const GgufFile file = GgufFile::open(path);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.metadata().size(), 16u);
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  EXPECT_EQ(file.get_integer("u8"), 200);
  EXPECT_EQ(file.get_integer("i8"), -2);
  EXPECT_EQ(file.get_integer("u16"), 65000);
  EXPECT_EQ(file.get_integer("i16"), -300);
  EXPECT_EQ(file.get_uint32("u32"), 4000000000u);
  EXPECT_EQ(file.get_integer("i32"), -7);
  EXPECT_EQ(file.get_float32("f32"), 0.25f);
  EXPECT_TRUE(file.get_bool("bool"));
  EXPECT_EQ(file.get_integer("u64"), 1ll << 40);
  EXPECT_EQ(file.get_integer("i64"), -(1ll << 40));
  EXPECT_EQ(file.get_number("f64"), -1.5);
  EXPECT_EQ(file.get_number("i32"), -7.0);
  EXPECT_EQ(file.get_strings("tokens"), (std::vector<std::string_view>{"a", "", "é\n"}));
  EXPECT_EQ(file.get_integers("ids"), (std::vector<int64_t>{5, -6}));
  EXPECT_EQ(file.get_float32s("scores"), (std::vector<float>{1.0f, -2.0f}));
  const GgufValue& nested = file.get("nested");
  EXPECT_EQ(nested.depth(), 2);
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested.element(0).size(), 2u);
  EXPECT_EQ(nested.element(0).element(1).to_integer(), 2);
  EXPECT_EQ(nested.element(1).element(0).to_integer(), 3);
  EXPECT_EQ(file.find("missing"), nullptr);

  ASSERT_EQ(file.tensors().size(), 3u);
  const GgufTensorInfo& a = file.tensor("a");
  EXPECT_EQ(a.dims, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.elements, 6u);
  EXPECT_EQ(a.bytes, 24u);
  EXPECT_EQ(file.dequantize(a), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const std::vector<float> b = file.dequantize(file.tensor("b"));
  ASSERT_EQ(b.size(), 32u);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b[j], 0.5f * static_cast<float>(j - 16)) << j;
  const std::vector<float> c = file.dequantize(file.tensor("c"));
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_EQ(c[1], -2.0f);
  EXPECT_EQ(c[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(c[3]));
  EXPECT_EQ(file.data_offset() + 96 + 8, file.file_size());
  EXPECT_EQ(file.find_tensor("d"), nullptr);
}

TEST(Gguf, VersionTwoAndCustomAlignment) {
  const fs::path dir = scratch_directory("formats");
  FileParts parts;
  parts.version = 2;
  parts.alignment = 64;
  parts.metadata = {kv("general.alignment", GgufType::UINT32, u32(64))};
  parts.tensors = {tensor_info("w", {2}, GgmlType::F32, 0), tensor_info("v", {1}, GgmlType::F32, 64)};
  parts.data = floats({7, 8}) + std::string(56, '\0') + floats({9});
  const GgufFile file = GgufFile::open(write_bytes(dir / "v2.gguf", gguf(parts)));
  EXPECT_EQ(file.version(), 2u);
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.data_offset() % 64, 0u);
  EXPECT_EQ(file.dequantize(file.tensor("v")), std::vector<float>{9});
}

TEST(Gguf, TypedGettersNameKeyAndTypes) {
  const fs::path dir = scratch_directory("formats");
  const std::string path = write_bytes(dir / "valid.gguf", gguf(valid_parts()));
  const GgufFile file = GgufFile::open(path);
  EXPECT_EQ(error_of([&] { (void)file.get_string("u32"); }),
            path + ": metadata key 'u32' is UINT32, expected STRING");
  EXPECT_EQ(error_of([&] { (void)file.get_uint32("u16"); }),
            path + ": metadata key 'u16' is UINT16, expected UINT32");
  EXPECT_EQ(error_of([&] { (void)file.get_strings("ids"); }),
            path + ": metadata key 'ids' is ARRAY of INT32, expected ARRAY of STRING");
  EXPECT_EQ(error_of([&] { (void)file.get_integer("f32"); }),
            path + ": metadata key 'f32' is FLOAT32, expected an integer");
  EXPECT_EQ(error_of([&] { (void)file.get_bool("missing.key"); }),
            path + ": no metadata key 'missing.key'");
  EXPECT_EQ(error_of([&] { (void)file.tensor("zz"); }),
            path + ": no tensor 'zz' (the file has 3 tensors: 'a', 'b', 'c')");
}

TEST(Gguf, DumpTextFollowsGgufDump) {
  const fs::path dir = scratch_directory("formats");
  const GgufFile file = GgufFile::open(write_bytes(dir / "valid.gguf", gguf(valid_parts())));
  const std::string text = gguf_dump_text(file);
  EXPECT_NE(text.find("* Dumping 19 key/value pair(s)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("      4: STRING     |        1 | general.architecture = 'llama'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("| f32 = 0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("| bool = True\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[STRING]   |        3 | tokens = ['a', '', 'é\\n']\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[[UINT8]]  |        3 | nested = [1, 2, 3]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("      2:         32 |    32,     1,     1,     1 | Q8_0    |         34 | b\n"),
            std::string::npos) << text;
}

// ---- hostile files --------------------------------------------------------------------------

TEST(GgufHostile, TruncatedAtEveryByte) {
  const fs::path dir = scratch_directory("formats");
  const std::string bytes = gguf(valid_parts());
  const std::string path = (dir / "x.gguf").string();
  for (size_t size = 0; size < bytes.size(); ++size) {
    const std::string message = open_error(dir, bytes.substr(0, size));
    ASSERT_FALSE(message.empty()) << "a prefix of " << size << " bytes opened";
    ASSERT_EQ(message.rfind(path + ": ", 0), 0u) << message;
    ASSERT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_EQ(open_error(dir, bytes), "");
}

TEST(GgufHostile, HeaderErrors) {
  const fs::path dir = scratch_directory("formats");
  expect_error(dir, "", "0 bytes, fewer than the 24-byte GGUF header");
  expect_error(dir, "GGUX" + u32(3) + u64(0) + u64(0), "not a GGUF file (it starts with 'GGUX'");
  expect_error(dir, "GGUF" + u32(1) + u64(0) + u64(0), "GGUF version 1 is not supported (2 and 3 are)");
  expect_error(dir, "GGUF" + u32(4) + u64(0) + u64(0), "GGUF version 4 is not supported");
  expect_error(dir, "GGUF" + u32(0x03000000) + u64(0) + u64(0), "a big-endian GGUF file");
  expect_error(dir, "GGUF" + u32(3) + u64(1ull << 63) + u64(0), "the tensor count is 9223372036854775808, but 0 bytes remain");
  expect_error(dir, "GGUF" + u32(3) + u64(0) + u64(~0ull), "the metadata count is 18446744073709551615");
  // A valid empty file.
  EXPECT_EQ(open_error(dir, "GGUF" + u32(3) + u64(0) + u64(0)), "");
}

TEST(GgufHostile, MetadataErrors) {
  const fs::path dir = scratch_directory("formats");
  const auto with = [](std::vector<std::string> metadata) {
    FileParts parts;
    parts.metadata = std::move(metadata);
    return gguf(parts);
  };
  // a key length past the end
  expect_error(dir, "GGUF" + u32(3) + u64(0) + u64(1) + u64(~0ull) + "abcdefgh",
               "metadata key 0 at byte 24 has length 18446744073709551615, past the end of the file");
  expect_error(dir, with({kv("s", GgufType::STRING, u64(1000) + "abc")}),
               "metadata 's' at byte 37 has length 1000, past the end");
  expect_error(dir, with({kv("k", GgufType::ARRAY, array(GgufType::UINT32, 1ull << 62, ""))}),
               "metadata 'k' element count is 4611686018427387904");
  expect_error(dir, with({kv("k", GgufType::ARRAY, array(GgufType::STRING, ~0ull, ""))}),
               "metadata 'k' element count is 18446744073709551615");
  expect_error(dir, with({kv("k", GgufType::ARRAY, array(GgufType::STRING, 2, str("x") + u64(99)))}),
               "metadata 'k'[1] at byte");
  expect_error(dir, with({kv("k", static_cast<GgufType>(13), u32(0))}), "metadata 'k' has unknown value type 13");
  expect_error(dir, with({kv("k", GgufType::ARRAY, array(static_cast<GgufType>(77), 0, ""))}),
               "metadata 'k' has unknown element type 77");
  expect_error(dir, "GGUF" + u32(3) + u64(0) + u64(1) + str("key") + type(GgufType::UINT32) + "ab",
               "truncated: metadata 'key' at byte 39 needs 4 bytes, 2 remain");
  expect_error(dir, with({kv("k", GgufType::UINT8, u8(1)), kv("k", GgufType::UINT8, u8(2))}),
               "metadata key 'k' appears twice");
  expect_error(dir, with({kv("general.alignment", GgufType::UINT64, u64(32))}),
               "general.alignment is UINT64, expected UINT32");
  expect_error(dir, with({kv("general.alignment", GgufType::UINT32, u32(48))}),
               "general.alignment is 48, not a power of two");
  expect_error(dir, with({kv("general.alignment", GgufType::UINT32, u32(0))}),
               "general.alignment is 0, not a power of two");
  expect_error(dir, with({kv("bad\nkey", GgufType::UINT8, u8(1)), kv("bad\nkey", GgufType::UINT8, u8(1))}),
               "metadata key 'bad\\nkey' appears twice");
}

// Arrays nested `depth` deep, the innermost holding one UINT8.
std::string nested_array(int depth) {
  std::string value;
  for (int d = 1; d < depth; ++d) value += type(GgufType::ARRAY) + u64(1);
  return value + array(GgufType::UINT8, 1, u8(9));
}

TEST(GgufHostile, NestedArrayDepth) {
  const fs::path dir = scratch_directory("formats");
  FileParts parts;
  parts.metadata = {kv("deep", GgufType::ARRAY, nested_array(kGgufMaxArrayDepth))};
  const std::string path = write_bytes(dir / "deep.gguf", gguf(parts));
  EXPECT_EQ(GgufFile::open(path).get("deep").depth(), kGgufMaxArrayDepth);
  parts.metadata = {kv("deep", GgufType::ARRAY, nested_array(kGgufMaxArrayDepth + 1))};
  expect_error(dir, gguf(parts), "nests arrays deeper than 8 levels");
  // 100,000 levels: refused at level 9, no deep recursion
  parts.metadata = {kv("deep", GgufType::ARRAY, nested_array(100000))};
  expect_error(dir, gguf(parts), "nests arrays deeper than 8 levels");
}

TEST(GgufHostile, TensorInfoErrors) {
  const fs::path dir = scratch_directory("formats");
  const auto with = [](std::vector<std::string> tensors, std::string data) {
    FileParts parts;
    parts.tensors = std::move(tensors);
    parts.data = std::move(data);
    return gguf(parts);
  };
  const std::string four_floats = floats({1, 2, 3, 4});
  expect_error(dir, with({tensor_info("t", {1, 1, 1, 1, 1}, GgmlType::F32, 0)}, four_floats),
               "tensor 't' has 5 dimensions; at most 4 are allowed");
  expect_error(dir, with({tensor_info("t", {1ull << 32, 1ull << 32}, GgmlType::F32, 0)}, four_floats),
               "tensor 't' has dimensions whose product overflows 63 bits");
  expect_error(dir, with({tensor_info("t", {~0ull}, GgmlType::F32, 0)}, four_floats),
               "tensor 't' has dimensions whose product overflows 63 bits");
  expect_error(dir, with({tensor_info("t", {4}, static_cast<GgmlType>(4), 0)}, four_floats),
               "tensor 't' has unknown ggml type 4");
  expect_error(dir, with({tensor_info("t", {33}, GgmlType::Q8_0, 0)}, std::string(64, '\0')),
               "tensor 't' has rows of 33 values, not a multiple of the Q8_0 block size 32");
  expect_error(dir, with({tensor_info("t", {2}, GgmlType::F32, 4)}, four_floats),
               "tensor 't' has data offset 4, not a multiple of the alignment 32");
  expect_error(dir, with({tensor_info("t", {4}, GgmlType::F32, 32)}, four_floats),
               "tensor 't' (16 bytes at data offset 32) ends past the end of the file: the data section has 16 bytes");
  expect_error(dir, with({tensor_info("t", {8}, GgmlType::F32, 0)}, four_floats),
               "tensor 't' (32 bytes at data offset 0) ends past the end");
  expect_error(dir, with({tensor_info("t", {4}, GgmlType::F32, ~0ull & ~31ull)}, four_floats),
               "ends past the end of the file");
  expect_error(dir, with({tensor_info("t", {1ull << 40, 1ull << 20}, GgmlType::F32, 0)}, four_floats),
               "(4611686018427387904 bytes at data offset 0) ends past the end");
  expect_error(dir, with({tensor_info("t", {4}, GgmlType::F32, 0), tensor_info("t", {4}, GgmlType::F32, 0)}, four_floats),
               "tensor name 't' appears twice");
  expect_error(dir, "GGUF" + u32(3) + u64(1) + u64(0) + str("t") + u32(1) + u64(4),
               "the tensor count is 1, but 21 bytes remain (at least 24 bytes each)");
  expect_error(dir, "GGUF" + u32(3) + u64(1) + u64(0) + str("t") + u32(1) + u64(4) + std::string(3, '\0'),
               "truncated: tensor 't' type at byte 45 needs 4 bytes, 3 remain");
}

// Found by gguf_fuzz (fuzz/regressions/gguf/): a tensor with a dimension 0 converted to an empty
// vector passed a null pointer to memcpy.
TEST(GgufHostile, EmptyTensor) {
  const fs::path dir = scratch_directory("formats");
  FileParts parts;
  parts.tensors = {tensor_info("empty", {4, 0}, GgmlType::F32, 0),
                   tensor_info("empty_q", {0, 3}, GgmlType::Q4_K, 0)};
  const GgufFile file = GgufFile::open(write_bytes(dir / "empty.gguf", gguf(parts)));
  EXPECT_EQ(file.tensors()[0].bytes, 0u);
  EXPECT_TRUE(file.dequantize(file.tensors()[0]).empty());
  EXPECT_TRUE(file.dequantize(file.tensors()[1]).empty());
}

TEST(GgufHostile, NotAFile) {
  const fs::path dir = scratch_directory("formats");
  const std::string missing = (dir / "missing.gguf").string();
  EXPECT_EQ(error_of([&] { (void)GgufFile::open(missing); }),
            missing + ": cannot open (No such file or directory)");
  EXPECT_EQ(error_of([&] { (void)GgufFile::open(dir.string()); }), dir.string() + ": not a regular file");
}

// ---- conversions of hand-made blocks -----------------------------------------------------------

std::vector<float> convert(GgmlType t, const std::string& bytes, size_t elements) {
  std::vector<float> out(elements);
  dequantize(static_cast<uint32_t>(t), reinterpret_cast<const uint8_t*>(bytes.data()), elements,
             out.data(), "test");
  return out;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(GgmlTypes, HalfAndBfloat) {
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(bits(half_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(half_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits(half_to_float(0x7C01)), 0x7F802000u);  // a NaN keeps its payload, as numpy
  EXPECT_EQ(convert(GgmlType::BF16, le<uint16_t>(0x3F80) + le<uint16_t>(0xC040), 2),
            (std::vector<float>{1.0f, -3.0f}));
}

TEST(GgmlTypes, SmallBlocks) {
  std::string q4_0 = le<uint16_t>(0x3C00);  // d = 1
  for (int j = 0; j < 16; ++j) q4_0 += u8(static_cast<uint8_t>(j | ((15 - j) << 4)));
  const std::vector<float> v4_0 = convert(GgmlType::Q4_0, q4_0, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v4_0[j], static_cast<float>(j - 8));
    EXPECT_EQ(v4_0[j + 16], static_cast<float>(7 - j));
  }
  std::string q4_1 = le<uint16_t>(0x4000) + le<uint16_t>(0xBC00);  // d = 2, m = -1
  for (int j = 0; j < 16; ++j) q4_1 += u8(static_cast<uint8_t>(j | (j << 4)));
  const std::vector<float> v4_1 = convert(GgmlType::Q4_1, q4_1, 32);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(v4_1[j + 16], 2.0f * j - 1.0f);
  // Q5_0: the fifth bit of value j is bit j of qh
  std::string q5_0 = le<uint16_t>(0x3C00) + u32(0x80000001u) + std::string(16, '\0');
  const std::vector<float> v5_0 = convert(GgmlType::Q5_0, q5_0, 32);
  EXPECT_EQ(v5_0[0], 0.0f);     // 16 - 16
  EXPECT_EQ(v5_0[1], -16.0f);   // 0 - 16
  EXPECT_EQ(v5_0[31], 0.0f);
  std::string q8_k = le(0.25f);
  for (int e = 0; e < 256; ++e) q8_k += u8(static_cast<uint8_t>(e));
  q8_k += std::string(32, '\0');
  const std::vector<float> v8_k = convert(GgmlType::Q8_K, q8_k, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(v8_k[e], 0.25f * static_cast<int8_t>(e)) << e;
}

TEST(GgmlTypes, UnsupportedTypeNamesTensorAndType) {
  const fs::path dir = scratch_directory("formats");
  FileParts parts;
  parts.tensors = {tensor_info("blk.0.attn_q.weight", {256}, GgmlType::IQ2_XXS, 0)};
  parts.data = std::string(66, '\0');
  const std::string path = write_bytes(dir / "iq.gguf", gguf(parts));
  const GgufFile file = GgufFile::open(path);
  EXPECT_EQ(file.tensors()[0].bytes, 66u);
  const std::string message = error_of([&] { (void)file.dequantize(file.tensors()[0]); });
  EXPECT_EQ(message.rfind("cannot convert tensor 'blk.0.attn_q.weight' of " + path +
                              ": ggml type IQ2_XXS is not supported (supported: F32, F16, Q4_0,",
                          0),
            0u)
      << message;
  EXPECT_EQ(ggml_type_name(4), "type 4");
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
}

// ---- the real files setup.sh fetches ------------------------------------------------------------

fs::path weights_file(const char* name) {
  const char* cache = std::getenv("ATTNKIT_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path base = cache != nullptr ? fs::path(cache) : fs::path(home != nullptr ? home : "") / ".cache/attnkit";
  return base / "weights" / name;
}

// What the file says of its model, and where its data ends: at the end of the file.
struct RealFile {
  const char* name;
  const char* architecture;
  uint32_t blocks, heads, kv_heads, hidden;
  size_t tokens, tensors;
  const char* embedding_type;
};

void check_real_file(const RealFile& expected) {
  const GgufFile file = GgufFile::open(weights_file(expected.name).string());
  const std::string arch = expected.architecture;
  EXPECT_EQ(file.get_string("general.architecture"), arch);
  EXPECT_EQ(file.get_uint32(arch + ".block_count"), expected.blocks);
  EXPECT_EQ(file.get_uint32(arch + ".attention.head_count"), expected.heads);
  EXPECT_EQ(file.get_uint32(arch + ".attention.head_count_kv"), expected.kv_heads);
  EXPECT_EQ(file.get_uint32(arch + ".embedding_length"), expected.hidden);
  EXPECT_EQ(file.get_strings("tokenizer.ggml.tokens").size(), expected.tokens);
  EXPECT_EQ(file.tensors().size(), expected.tensors);
  const GgufTensorInfo& embedding = file.tensor("token_embd.weight");
  EXPECT_EQ(ggml_type_name(embedding.type), expected.embedding_type);
  EXPECT_EQ(embedding.shape(), (std::vector<int64_t>{static_cast<int64_t>(expected.tokens), expected.hidden}));
  uint64_t end = 0;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    end = std::max(end, tensor.offset + tensor.bytes);
    EXPECT_NE(find_ggml_type(tensor.type)->dequantize, nullptr) << tensor.name;
  }
  EXPECT_EQ(file.data_offset() + end, file.file_size());
}

#define ATTNKIT_REAL_FILE_OR_SKIP(file)                      \
  if (!fs::exists(weights_file((file).name)))                \
  GTEST_SKIP() << weights_file((file).name) << " is absent (scripts/setup.sh fetches it)"

TEST(GgufRealFiles, SmolLM2) {
  const RealFile smollm2{"smollm2-135m-instruct.gguf", "llama", 30, 9, 3, 576, 49152, 272, "Q8_0"};
  ATTNKIT_REAL_FILE_OR_SKIP(smollm2);
  check_real_file(smollm2);
  const GgufFile file = GgufFile::open(weights_file(smollm2.name).string());
  EXPECT_EQ(file.get_float32("llama.rope.freq_base"), 100000.0f);
}

TEST(GgufRealFiles, Gemma3) {
  const RealFile gemma3{"gemma-3-270m-q4_k_m.gguf", "gemma3", 18, 4, 1, 640, 262144, 236, "Q8_0"};
  ATTNKIT_REAL_FILE_OR_SKIP(gemma3);
  check_real_file(gemma3);
  const GgufFile file = GgufFile::open(weights_file(gemma3.name).string());
  EXPECT_EQ(file.get_uint32("gemma3.attention.sliding_window"), 512u);
}

}  // namespace
}  // namespace attnkit::formats
