// safetensors: reading hand-written files byte by byte, the reference implementation's own byte
// sequences, round trips of every dtype and shape, one crafted bad file per validation rule, and
// random corruptions that must be rejected or read safely.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attnkit/error.h"
#include "attnkit/io/safetensors.h"

namespace attnkit::io {
namespace {

namespace fs = std::filesystem;

// ---- helpers ------------------------------------------------------------------------------------

std::string u64_le(uint64_t value) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  return bytes;
}

std::string raw(std::initializer_list<unsigned> bytes) {
  std::string out;
  for (unsigned byte : bytes) out.push_back(static_cast<char>(byte));
  return out;
}

// A file from its parts: the header length, the header exactly as given, the data buffer.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return u64_le(header.size()) + header + data;
}

// The JSON header of serialized bytes (with its padding).
std::string header_of(const std::string& bytes) {
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = (size << 8) | static_cast<unsigned char>(bytes[i]);
  return bytes.substr(8, size);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Whether this process has the file memory-mapped.
bool is_mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0)
      return true;
  return false;
}

// Same dtype, shape and bytes (so NaN equals NaN and -0.0 differs from 0.0).
void expect_same_tensor(const at::Tensor& actual, const at::Tensor& expected,
                        const std::string& what) {
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const at::Tensor a = actual.contiguous();
  const at::Tensor b = expected.contiguous();
  if (a.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << what;
  }
}

void expect_message(const std::string& message, const std::string& prefix,
                    std::initializer_list<std::string> fragments) {
  EXPECT_EQ(message.rfind(prefix + ": ", 0), 0u)
      << "'" << prefix << ": ' does not start: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  for (const std::string& fragment : fragments)
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "'" << fragment << "' not in: " << message;
}

const std::vector<at::ScalarType> kAllDtypes = {at::kDouble, at::kFloat, at::kHalf,  at::kBFloat16,
                                                at::kLong,   at::kInt,   at::kShort, at::kChar,
                                                at::kByte,   at::kBool};

at::Tensor random_tensor(at::ScalarType dtype, at::IntArrayRef shape) {
  if (dtype == at::kBool) return at::randint(0, 2, shape, at::kLong).to(at::kBool);
  if (dtype == at::kByte) return at::randint(0, 256, shape, at::kLong).to(at::kByte);
  if (at::isFloatingType(dtype)) return (at::randn(shape, at::kDouble) * 100).to(dtype);
  return at::randint(-128, 128, shape, at::kLong).to(dtype);
}

// Each test gets a fresh directory, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "attnkit_safetensors_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
    at::manual_seed(0);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  std::string write_file(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // Expects open() of these bytes to throw attnkit::Error "<path>: ..." mentioning every fragment.
  void expect_open_error(const std::string& bytes, std::initializer_list<std::string> fragments) {
    const std::string file = write_file("bad.safetensors", bytes);
    try {
      SafetensorsFile::open(file);
      ADD_FAILURE() << "opened " << ::testing::PrintToString(bytes);
    } catch (const Error& e) {
      expect_message(e.what(), file, fragments);
    }
    fs::remove(file);  // rewriting it would be slow: ext4 flushes a truncated file's new data
  }

  // Expects save and serialize to reject the input, naming their context; save writes nothing.
  void expect_save_error(const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata,
                         std::initializer_list<std::string> fragments) {
    const std::string file = path("rejected.safetensors");
    try {
      save_safetensors(file, tensors, metadata);
      ADD_FAILURE() << "saved";
    } catch (const Error& e) {
      expect_message(e.what(), file, fragments);
    }
    EXPECT_TRUE(fs::is_empty(directory_));
    try {
      serialize_safetensors(tensors, metadata);
      ADD_FAILURE() << "serialized";
    } catch (const Error& e) {
      expect_message(e.what(), "serialize_safetensors", fragments);
    }
  }

  fs::path directory_;
};

// ---- reading valid files ------------------------------------------------------------------------

TEST_F(SafetensorsTest, HandWrittenFileIsReadAsWritten) {
  // Written the way another implementation might: whitespace, metadata in the middle, entries in
  // neither name nor offset order, an unpadded header, a 0-dim and a zero-size tensor.
  const std::string header = R"({
    "weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "__metadata__": {"format": "pt", "note": "hand written"},
    "step": {"dtype": "I64", "shape": [1], "data_offsets": [25, 33]},
    "bias": {"dtype": "BF16", "shape": [2], "data_offsets": [16, 20]},
    "scale": {"dtype": "F16", "shape": [], "data_offsets": [20, 22]},
    "flags": {"dtype": "BOOL", "shape": [3], "data_offsets": [22, 25]},
    "empty": {"dtype": "U8", "shape": [0, 4], "data_offsets": [25, 25]}
  })";
  const std::string data =
      raw({0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,    // weight: 1.0, 2.0,
           0x00, 0x00, 0x00, 0xbf, 0x00, 0x00, 0x40, 0x40,    //         -0.5, 3.0 (float32)
           0x80, 0x3f, 0x00, 0xc0,                            // bias: 1.0, -2.0 (bfloat16)
           0x00, 0x3e,                                        // scale: 1.5 (float16)
           0x01, 0x00, 0x01,                                  // flags
           0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});  // step: -5 (int64)
  const SafetensorsFile file =
      SafetensorsFile::open(write_file("hand.safetensors", file_bytes(header, data)));

  std::vector<std::string> offset_order;
  for (const TensorEntry& entry : file.entries()) offset_order.push_back(entry.name);
  EXPECT_EQ(offset_order,
            (std::vector<std::string>{"weight", "bias", "scale", "flags", "empty", "step"}));
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"bias", "empty", "flags", "scale", "step", "weight"}));
  EXPECT_TRUE(file.contains("bias"));
  EXPECT_FALSE(file.contains("__metadata__"));
  EXPECT_EQ(file.metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hand written"}}));

  const TensorEntry& bias = file.entry("bias");
  EXPECT_EQ(bias.dtype, "BF16");
  EXPECT_EQ(bias.scalar_type, at::kBFloat16);
  EXPECT_EQ(bias.shape, std::vector<int64_t>{2});
  EXPECT_EQ(bias.begin, 16u);
  EXPECT_EQ(bias.end, 20u);
  EXPECT_TRUE(file.entry("scale").shape.empty());

  expect_same_tensor(file.tensor("weight"), at::tensor({1.0f, 2.0f, -0.5f, 3.0f}).view({2, 2}),
                     "weight");
  expect_same_tensor(file.tensor("bias"), at::tensor({1.0f, -2.0f}).to(at::kBFloat16), "bias");
  expect_same_tensor(file.tensor("scale"), at::scalar_tensor(1.5, at::kHalf), "scale");
  expect_same_tensor(file.tensor("flags"), at::tensor({1, 0, 1}).to(at::kBool), "flags");
  expect_same_tensor(file.tensor("empty"), at::empty({0, 4}, at::kByte), "empty");
  expect_same_tensor(file.tensor("step"), at::tensor({int64_t{-5}}), "step");
  EXPECT_EQ(file.tensor("scale").dim(), 0);
  // read_into: the same tensors, over the mapping where aligned ("step" at byte 25 is not: a copy),
  // BOOLs checked; the loaders' one copy per tensor reads them this way.
  for (const TensorEntry& entry : file.entries()) {
    int calls = 0;
    file.read_into(entry.name, [&](const at::Tensor& t) {
      ++calls;
      expect_same_tensor(t, file.tensor(entry.name), entry.name);
    });
    EXPECT_EQ(calls, 1) << entry.name;
  }
  // shared_tensor: none where the bytes are not shared as they are (BOOL bytes are checked by
  // copying; no elements; "step" at byte 25 is off its element's alignment, let alone a line).
  for (const char* name : {"flags", "empty", "step"}) EXPECT_FALSE(file.shared_tensor(name).defined()) << name;
}

TEST_F(SafetensorsTest, MappableLayoutPutsWholeLinesOnLinesAndThoseAreShared) {
  // Three floats (12 bytes) sort first by name and shift every later tensor off its line in the
  // reference layout; the mappable layout puts the whole-line tensors first, on lines.
  const NamedTensors tensors = {{"a_odd", at::arange(3, at::kFloat)},
                                {"b_lines", at::arange(32, at::kFloat).view({2, 16})},
                                {"c_lines", at::arange(16, at::kDouble)},
                                {"d_odd", at::arange(5, at::kLong)},
                                {"e_lines", at::ones({64}, at::kChar)},
                                {"f_flags", at::ones({64}, at::kBool)}};
  save_safetensors(path("reference.safetensors"), tensors);
  save_safetensors(path("mappable.safetensors"), tensors, {}, SafetensorsLayout::kMappable);
  const SafetensorsFile reference = SafetensorsFile::open(path("reference.safetensors"));
  const SafetensorsFile mappable = SafetensorsFile::open(path("mappable.safetensors"));
  EXPECT_FALSE(reference.shared_tensor("b_lines").defined());  // 12 bytes past a line
  std::vector<std::string> order;
  for (const TensorEntry& entry : mappable.entries()) order.push_back(entry.name);
  EXPECT_EQ(order, (std::vector<std::string>{"c_lines", "b_lines", "e_lines", "f_flags", "d_odd", "a_odd"}));
  for (const auto& [name, tensor] : tensors) {
    expect_same_tensor(mappable.tensor(name), tensor, name);
    const at::Tensor shared = mappable.shared_tensor(name);
    // The whole-line tensors, and the first of the rest (d_odd, 40 bytes) which starts on the line
    // after them; not a_odd behind it, nor the BOOL tensor (its bytes are checked by copying).
    const bool on_a_line = name.find("_lines") != std::string::npos || name == "d_odd";
    EXPECT_EQ(shared.defined(), on_a_line) << name;
    if (!shared.defined()) continue;
    expect_same_tensor(shared, tensor, name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(shared.data_ptr()) % kMappableAlignment, 0u) << name;
  }
  // The header is padded to the line with spaces and nothing else changes: the same JSON entries.
  const std::string bytes = serialize_safetensors(tensors, {}, SafetensorsLayout::kMappable);
  EXPECT_EQ(bytes.size() - reference.entries().back().end, header_of(bytes).size() + 8);
  EXPECT_EQ((8 + header_of(bytes).size()) % kMappableAlignment, 0u);
  const std::string header = header_of(bytes);
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
}

TEST_F(SafetensorsTest, SharedTensorOutlivesTheFileAndWritesNeverReachIt) {
  const at::Tensor weight = at::arange(16, at::kFloat).view({4, 4});  // one 64-byte line
  save_safetensors(path("shared.safetensors"), {{"weight", weight}, {"bias", at::ones({4})}}, {},
                   SafetensorsLayout::kMappable);
  at::Tensor shared;
  {
    const SafetensorsFile file = SafetensorsFile::open(path("shared.safetensors"));
    shared = file.shared_tensor("weight");
  }  // the file object is gone; the tensor keeps the mapping
  expect_same_tensor(shared, weight, "weight");
  shared.mul_(2);  // copy-on-write: the process's page only
  expect_same_tensor(shared, weight * 2, "written");
  const SafetensorsFile again = SafetensorsFile::open(path("shared.safetensors"));
  expect_same_tensor(again.tensor("weight"), weight, "the file after the write");
}

TEST_F(SafetensorsTest, FileWithoutTensorsOpens) {
  const SafetensorsFile file =
      SafetensorsFile::open(write_file("none.safetensors", file_bytes("{}      ")));
  EXPECT_TRUE(file.entries().empty());
  EXPECT_TRUE(file.metadata().empty());
  try {
    file.entry("x");
    ADD_FAILURE() << "found x";
  } catch (const Error& e) {
    expect_message(e.what(), file.path(), {"no tensor named \"x\"", "the file has no tensors"});
  }
}

TEST_F(SafetensorsTest, UnknownNameErrorListsKnownNames) {
  NamedTensors tensors;
  for (int i = 0; i < 12; ++i) tensors.emplace_back(fmt::format("t{:02}", i), at::zeros({1}));
  save_safetensors(path("many.safetensors"), tensors);
  const SafetensorsFile file = SafetensorsFile::open(path("many.safetensors"));
  try {
    file.tensor("missing");
    ADD_FAILURE() << "found missing";
  } catch (const Error& e) {
    expect_message(
        e.what(), file.path(),
        {"no tensor named \"missing\"", "12 tensors", "\"t00\", \"t01\"", "\"t09\", ... (2 more)"});
    EXPECT_EQ(std::string(e.what()).find("t10"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, ZeroSizeTensorsMayShareOffsets) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("c":{"dtype":"I64","shape":[3,0],"data_offsets":[8,8]},)"
                             R"("d":{"dtype":"F16","shape":[0,0],"data_offsets":[8,8]}})";
  const SafetensorsFile file = SafetensorsFile::open(
      write_file("zero.safetensors", file_bytes(header, std::string(8, '\0'))));
  EXPECT_EQ(file.tensor("c").sizes(), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(file.tensor("b").numel(), 2);
}

TEST_F(SafetensorsTest, NullMetadataMeansNone) {
  const SafetensorsFile file =
      SafetensorsFile::open(write_file("null.safetensors", file_bytes(R"({"__metadata__":null})")));
  EXPECT_TRUE(file.metadata().empty());
}

TEST_F(SafetensorsTest, UnknownKeysInAnEntryAreIgnored) {
  // As in the reference implementation, whose entry type does not deny unknown fields.
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"note":[1]}})";
  const SafetensorsFile file = SafetensorsFile::open(
      write_file("extra.safetensors", file_bytes(header, raw({0, 0, 0x80, 0x3f}))));
  expect_same_tensor(file.tensor("a"), at::ones({1}), "a");
}

TEST_F(SafetensorsTest, MovedFileKeepsItsMappingAndEveryMappingIsReleased) {
  save_safetensors(path("one.safetensors"), {{"x", at::tensor({1.0f})}});
  save_safetensors(path("two.safetensors"), {{"y", at::tensor({2.0f})}});
  {
    SafetensorsFile moved = SafetensorsFile::open(path("one.safetensors"));
    SafetensorsFile first = std::move(moved);
    SafetensorsFile second = SafetensorsFile::open(path("two.safetensors"));
    EXPECT_TRUE(is_mapped(path("two.safetensors")));
    second = std::move(first);
    EXPECT_FALSE(is_mapped(path("two.safetensors")));
    EXPECT_EQ(second.path(), path("one.safetensors"));
    expect_same_tensor(second.tensor("x"), at::tensor({1.0f}), "x");
    EXPECT_FALSE(second.contains("y"));
    EXPECT_TRUE(is_mapped(path("one.safetensors")));
  }
  EXPECT_FALSE(is_mapped(path("one.safetensors")));
  // A file that fails validation is unmapped too.
  EXPECT_THROW(SafetensorsFile::open(write_file("bad.safetensors", file_bytes("[]"))), Error);
  EXPECT_FALSE(is_mapped(path("bad.safetensors")));
}

TEST_F(SafetensorsTest, TensorsOwnTheirBytes) {
  save_safetensors(path("own.safetensors"), {{"x", at::arange(4, at::kFloat)}});
  at::Tensor x;
  {
    const SafetensorsFile file = SafetensorsFile::open(path("own.safetensors"));
    x = file.tensor("x");
  }           // unmapped
  x.add_(1);  // writable, and not a view of the (read-only) mapping
  expect_same_tensor(x, at::arange(1, 5, at::kFloat), "x");
}

TEST_F(SafetensorsTest, OpenFileKeepsReadingTheOldContentWhenTheFileIsReplaced) {
  // save_safetensors renames a new file into place, so a mapping of the old one stays intact.
  save_safetensors(path("model.safetensors"), {{"x", at::tensor({1.0f})}});
  const SafetensorsFile old_file = SafetensorsFile::open(path("model.safetensors"));
  save_safetensors(path("model.safetensors"), {{"x", at::tensor({2.0f, 3.0f})}});
  expect_same_tensor(old_file.tensor("x"), at::tensor({1.0f}), "old");
  expect_same_tensor(load_safetensors(path("model.safetensors")).at("x"), at::tensor({2.0f, 3.0f}),
                     "new");
}

// ---- writing ------------------------------------------------------------------------------------

TEST_F(SafetensorsTest, SerializeMatchesTheReferenceImplementationByteForByte) {
  // The byte sequences that the reference implementation's tests expect (safetensors/src/tensor.rs:
  // test_serialization, test_serialization_forced_alignement, test_empty).
  const std::string floats =
      raw({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
           0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0xa0, 0x40});
  const at::Tensor values = at::arange(6, at::kFloat);
  EXPECT_EQ(
      serialize_safetensors({{"attn.0", values.view({1, 2, 3})}}),
      u64_le(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + floats);
  EXPECT_EQ(serialize_safetensors({{"attn0", values.view({1, 1, 2, 3})}}),
            u64_le(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                std::string(7, ' ') + floats);
  EXPECT_EQ(serialize_safetensors({}), u64_le(8) + "{}" + std::string(6, ' '));
  EXPECT_EQ(serialize_safetensors({}, {{"framework", "pt"}}),
            u64_le(40) + R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '));
}

TEST_F(SafetensorsTest, SerializeOrdersEntriesByDtypeThenName) {
  const std::vector<std::pair<const char*, at::ScalarType>> given = {
      {"bool", at::kBool},   {"u8", at::kByte},    {"b_f32", at::kFloat},   {"i8", at::kChar},
      {"i16", at::kShort},   {"f16", at::kHalf},   {"bf16", at::kBFloat16}, {"i32", at::kInt},
      {"a_f32", at::kFloat}, {"f64", at::kDouble}, {"i64", at::kLong}};
  NamedTensors tensors;
  for (const auto& [name, dtype] : given) tensors.emplace_back(name, random_tensor(dtype, {3}));
  const auto header = nlohmann::ordered_json::parse(header_of(serialize_safetensors(tensors)));
  std::vector<std::string> order;
  uint64_t offset = 0;
  for (const auto& [name, entry] : header.items()) {
    order.push_back(name);
    EXPECT_EQ(entry["data_offsets"][0].get<uint64_t>(), offset) << name;
    offset = entry["data_offsets"][1].get<uint64_t>();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"i64", "f64", "a_f32", "b_f32", "i32", "bf16", "f16",
                                             "i16", "i8", "u8", "bool"}));
}

TEST_F(SafetensorsTest, HeaderIsPaddedWithSpacesToAMultipleOfEight) {
  for (size_t length = 1; length <= 16; ++length) {
    const std::string name(length, 'n');
    const std::string bytes = serialize_safetensors({{name, at::ones({2}, at::kDouble)}});
    const std::string header = header_of(bytes);
    const std::string json =
        R"({")" + name + R"(":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
    EXPECT_EQ(header.size() % 8, 0u) << length;
    EXPECT_EQ(header, json + std::string(header.size() - json.size(), ' ')) << length;
    EXPECT_LT(header.size() - json.size(), 8u) << length;
    EXPECT_EQ(bytes.size(), 8 + header.size() + 16) << length;
  }
}

TEST_F(SafetensorsTest, MetadataComesFirstAndOnlyWhenNotEmpty) {
  const NamedTensors tensors = {{"x", at::ones({1})}};
  EXPECT_EQ(header_of(serialize_safetensors(tensors, {})).find("__metadata__"), std::string::npos);
  const std::string header = header_of(serialize_safetensors(tensors, {{"b", "2"}, {"a", "1"}}));
  EXPECT_EQ(header.rfind(R"({"__metadata__":{"a":"1","b":"2"},"x":)", 0), 0u) << header;
}

TEST_F(SafetensorsTest, SaveWritesTheSerializedBytesAndNothingElse) {
  const NamedTensors tensors = {{"w", at::randn({3, 5})}, {"ids", at::arange(7)}};
  save_safetensors(path("model.safetensors"), tensors, {{"format", "pt"}});
  save_safetensors(path("model.safetensors"), tensors, {{"format", "pt"}});  // replaces it
  EXPECT_EQ(read_file(path("model.safetensors")),
            serialize_safetensors(tensors, {{"format", "pt"}}));
  std::vector<std::string> files;
  for (const auto& item : fs::directory_iterator(directory_))
    files.push_back(item.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});  // no temporary file left
}

TEST_F(SafetensorsTest, EveryDtypeAndShapeRoundTrips) {
  const std::vector<std::vector<int64_t>> shapes = {{},     {0},       {1},         {5},
                                                    {2, 3}, {2, 0, 4}, {2, 1, 3, 2}};
  NamedTensors tensors;
  for (at::ScalarType dtype : kAllDtypes)
    for (const auto& shape : shapes)
      tensors.emplace_back(fmt::format("{}{}", c10::toString(dtype), fmt::join(shape, "x")),
                           random_tensor(dtype, shape));
  // Extreme values travel as bits.
  const double inf = std::numeric_limits<double>::infinity();
  for (at::ScalarType dtype : {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16})
    tensors.emplace_back(fmt::format("special_{}", c10::toString(dtype)),
                         at::tensor({inf, -inf, std::nan(""), -0.0, 1e-40}, at::kDouble).to(dtype));
  tensors.emplace_back("int64_limits", at::tensor({std::numeric_limits<int64_t>::min(),
                                                   std::numeric_limits<int64_t>::max()}));
  tensors.emplace_back("int32_limits", at::tensor({std::numeric_limits<int32_t>::min(),
                                                   std::numeric_limits<int32_t>::max()}));

  save_safetensors(path("all.safetensors"), tensors, {{"kind", "round trip"}});
  const SafetensorsFile file = SafetensorsFile::open(path("all.safetensors"));
  EXPECT_EQ(file.entries().size(), tensors.size());
  EXPECT_EQ(file.metadata().at("kind"), "round trip");
  for (const auto& [name, tensor] : tensors) {
    EXPECT_EQ(file.entry(name).shape, tensor.sizes().vec()) << name;
    expect_same_tensor(file.tensor(name), tensor, name);
  }
  const auto loaded = load_safetensors(path("all.safetensors"));
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) expect_same_tensor(loaded.at(name), tensor, name);
}

TEST_F(SafetensorsTest, NonContiguousTensorsAreSavedInLogicalOrder) {
  const at::Tensor base = at::arange(24, at::kFloat).view({4, 6});
  const NamedTensors tensors = {
      {"transposed", base.t()},
      {"strided", base.slice(1, 0, 6, 2)},
      {"offset", base.narrow(0, 1, 2)},
      {"broadcast", at::arange(3, at::kLong).expand({4, 3})},
      {"requires_grad", at::ones({2, 2}, at::kDouble).requires_grad_().t()},
  };
  save_safetensors(path("views.safetensors"), tensors);
  const auto loaded = load_safetensors(path("views.safetensors"));
  for (const auto& [name, tensor] : tensors) {
    expect_same_tensor(loaded.at(name), tensor.detach(), name);
    EXPECT_TRUE(loaded.at(name).is_contiguous()) << name;
  }
}

TEST_F(SafetensorsTest, MetadataRoundTrips) {
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"empty", ""},
                                                       {"ünïcödé", "値 \"quoted\"\n\ttabbed\\"},
                                                       {"__metadata__", "x"}};
  save_safetensors(path("meta.safetensors"), {{"x", at::ones({1})}}, metadata);
  EXPECT_EQ(SafetensorsFile::open(path("meta.safetensors")).metadata(), metadata);
}

TEST_F(SafetensorsTest, SaveRejectsInvalidInput) {
  const at::Tensor ok = at::ones({2});
  expect_save_error({{"", ok}}, {}, {"a tensor name is empty"});
  expect_save_error({{"a", ok}, {"b", ok}, {"a", ok}}, {}, {"tensor name \"a\" appears twice"});
  expect_save_error({{"__metadata__", ok}}, {}, {"\"__metadata__\" is reserved"});
  expect_save_error({{"u", at::Tensor()}}, {}, {"tensor \"u\" is undefined"});
  expect_save_error(
      {{"c", at::zeros({2}, at::kComplexFloat)}}, {},
      {"tensor \"c\": dtype ComplexFloat cannot be saved", "supported: F64 (Double)"});
  expect_save_error({{"s", at::eye(3).to_sparse()}}, {}, {"tensor \"s\" has layout Sparse"});
  expect_save_error({{"bad\xff", ok}}, {}, {"tensor name is not valid UTF-8 (byte 3"});
  expect_save_error({{"x", ok}}, {{"k", "\xc3("}}, {"metadata value of \"k\" is not valid UTF-8"});
}

// ---- one crafted bad file per validation rule ---------------------------------------------------

TEST_F(SafetensorsTest, FileShorterThanTheHeaderLengthIsRejected) {
  expect_open_error("", {"the file has 0 bytes", "fewer than the 8-byte header length"});
  expect_open_error(raw({1, 0, 0}), {"the file has 3 bytes"});
}

TEST_F(SafetensorsTest, MissingFileAndDirectoryAreRejected) {
  try {
    SafetensorsFile::open(path("missing.safetensors"));
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    expect_message(e.what(), path("missing.safetensors"), {"cannot open", std::strerror(ENOENT)});
  }
  try {
    SafetensorsFile::open(directory_.string());
    ADD_FAILURE() << "opened a directory";
  } catch (const Error& e) {
    expect_message(e.what(), directory_.string(), {"not a regular file"});
  }
}

TEST_F(SafetensorsTest, HeaderLengthAboveTheLimitIsRejected) {
  expect_open_error(u64_le(100'000'001) + "{}",
                    {"header length 100000001 exceeds the limit of 100000000 bytes"});
  expect_open_error(u64_le(std::numeric_limits<uint64_t>::max()) + "{}",
                    {"header length 18446744073709551615"});
}

TEST_F(SafetensorsTest, HeaderLengthBeyondTheFileIsRejected) {
  expect_open_error(u64_le(100) + "{}", {"header length 100 exceeds the 2 bytes that follow it"});
}

TEST_F(SafetensorsTest, HeaderThatIsNotUtf8IsRejected) {
  expect_open_error(file_bytes("{\"a\xff\":1}"), {"header is not valid UTF-8 (byte 3)"});
  expect_open_error(file_bytes("{\"\xed\xa0\x80\":1}"),
                    {"not valid UTF-8 (byte 2)"});                                  // a surrogate
  expect_open_error(file_bytes("{\"\xc0\xaf\":1}"), {"not valid UTF-8 (byte 2)"});  // overlong '/'
}

TEST_F(SafetensorsTest, HeaderThatIsNotJsonIsRejected) {
  expect_open_error(file_bytes(""), {"header is not valid JSON"});
  expect_open_error(file_bytes(R"({"a": )"),
                    {"header is not valid JSON", "unexpected end of input"});
  expect_open_error(file_bytes("{} x"), {"header is not valid JSON"});
  // nlohmann::json alone would stop at a NUL byte and accept these.
  expect_open_error(file_bytes(std::string("{}\0\0", 4)),
                    {"header is not valid JSON: it has a NUL byte (byte 2)"});
  expect_open_error(file_bytes(std::string("{}\0{\"a\": 1", 10)), {"it has a NUL byte (byte 2)"});
}

TEST_F(SafetensorsTest, HeaderThatIsNotAnObjectIsRejected) {
  expect_open_error(file_bytes("[1, 2]"), {"header is a JSON array, not an object"});
  expect_open_error(file_bytes("\"{}\""), {"header is a JSON string, not an object"});
}

TEST_F(SafetensorsTest, RepeatedTensorNameIsRejected) {
  const std::string entry = R"({"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  expect_open_error(file_bytes(R"({"a":)" + entry + R"(,"b":)" + entry + R"(,"a":)" + entry + "}"),
                    {"header names tensor \"a\" twice"});
  expect_open_error(file_bytes(R"({"__metadata__":{},"__metadata__":{}})"),
                    {"header has \"__metadata__\" twice"});
}

TEST_F(SafetensorsTest, RepeatedKeyInsideAnEntryIsRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"dtype":"I64"}})"),
      {"header entry \"a\" has key \"dtype\" twice"});
  expect_open_error(file_bytes(R"({"__metadata__":{"k":"1","k":"2"}})"),
                    {"header entry \"__metadata__\" has key \"k\" twice"});
}

TEST_F(SafetensorsTest, EntryThatIsNotAnObjectIsRejected) {
  expect_open_error(file_bytes(R"({"a":[1,2]})"),
                    {"tensor \"a\": the entry is a JSON array, not an object"});
  expect_open_error(file_bytes(R"({"a":null})"), {"tensor \"a\": the entry is a JSON null"});
}

TEST_F(SafetensorsTest, EntryWithoutARequiredFieldIsRejected) {
  expect_open_error(file_bytes(R"({"a":{"shape":[0],"data_offsets":[0,0]}})"),
                    {"tensor \"a\": the entry has no \"dtype\""});
  expect_open_error(file_bytes(R"({"a":{"dtype":"F32","data_offsets":[0,0]}})"),
                    {"tensor \"a\": the entry has no \"shape\""});
  expect_open_error(file_bytes(R"({"a":{"dtype":"F32","shape":[0]}})"),
                    {"tensor \"a\": the entry has no \"data_offsets\""});
}

TEST_F(SafetensorsTest, FieldOfTheWrongTypeIsRejected) {
  expect_open_error(file_bytes(R"({"a":{"dtype":32,"shape":[0],"data_offsets":[0,0]}})"),
                    {"tensor \"a\": \"dtype\" is 32 but must be a string"});
  expect_open_error(file_bytes(R"({"a":{"dtype":"F32","shape":"[0]","data_offsets":[0,0]}})"),
                    {"tensor \"a\": \"shape\" is \"[0]\" but must be an array"});
  for (const char* offsets : {"[0]", "[0,0,0]", "{}", "0", R"([0,"0"])", "[0.0,0]"})
    expect_open_error(file_bytes(fmt::format(
                          R"({{"a":{{"dtype":"F32","shape":[0],"data_offsets":{}}}}})", offsets)),
                      {"tensor \"a\": \"data_offsets\" is", "must be [begin, end]"});
}

TEST_F(SafetensorsTest, NegativeDimensionIsRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}})"),
      {"tensor \"a\": \"shape\" is [2,-1] but must be an array of non-negative dimensions"});
}

TEST_F(SafetensorsTest, NonIntegerDimensionIsRejected) {
  for (const char* dim :
       {"2.0", "1.5", "\"2\"", "true", "null", "[2]", "1e30", "9223372036854775808"})
    expect_open_error(
        file_bytes(
            fmt::format(R"({{"a":{{"dtype":"F32","shape":[{}],"data_offsets":[0,8]}}}})", dim),
            std::string(8, '\0')),
        {"tensor \"a\": \"shape\" is", "must be an array of integers in [0, 2^63)"});
}

TEST_F(SafetensorsTest, UnsupportedDtypeIsRejected) {
  for (const char* dtype : {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "f32", "float32", ""})
    expect_open_error(file_bytes(fmt::format(
                          R"({{"w":{{"dtype":"{}","shape":[0],"data_offsets":[0,0]}}}})", dtype)),
                      {fmt::format("tensor \"w\": dtype \"{}\" is not supported", dtype),
                       "supported: F64 (Double), F32 (Float)"});
}

TEST_F(SafetensorsTest, NegativeOffsetIsRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})", std::string(4, '\0')),
      {"tensor \"a\": \"data_offsets\" is [-4,0] but must be [begin, end] (non-negative "
       "integers)"});
}

TEST_F(SafetensorsTest, OffsetsThatBeginAfterTheyEndAreRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", std::string(8, '\0')),
      {"tensor \"a\": data_offsets [8,4] begin after they end"});
}

TEST_F(SafetensorsTest, OffsetsBeyondTheDataBufferAreRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')),
      {"tensor \"a\": data_offsets [0,8] end beyond the data buffer (4 bytes)"});
}

TEST_F(SafetensorsTest, ByteSizeDifferentFromTheShapeIsRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
      {"tensor \"a\": data_offsets [0,8] span 8 bytes but F32 of shape [3] needs 12"});
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"BF16","shape":[],"data_offsets":[0,1]}})", std::string(1, '\0')),
      {"span 1 bytes but BF16 of shape [] needs 2"});
}

TEST_F(SafetensorsTest, ShapeWhoseSizeOverflowsIsRejected) {
  // Unchecked, 2^32 * 2^32 * 8 wraps around to 0 bytes, which would match these offsets.
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      {"tensor \"a\": shape [4294967296,4294967296] has too many elements"});
  // Empty, but ATen's strides would overflow.
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
      {"tensor \"a\": shape [0,4294967296,4294967296] has too many elements"});
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})"),
      {"tensor \"a\": shape [2305843009213693952] has too many bytes"});
}

TEST_F(SafetensorsTest, OverlappingTensorsAreRejected) {
  expect_open_error(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               std::string(12, '\0')),
                    {"tensor \"b\" (bytes [4, 12)) overlaps tensor \"a\" (bytes [0, 8))"});
  // The same bytes for two tensors.
  expect_open_error(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                               std::string(4, '\0')),
                    {"tensor \"b\" (bytes [0, 4)) overlaps tensor \"a\" (bytes [0, 4))"});
}

TEST_F(SafetensorsTest, GapBetweenTensorsIsRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                 std::string(12, '\0')),
      {"bytes [4, 8) of the data buffer belong to no tensor (a gap before tensor \"b\")"});
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
      {"bytes [0, 4) of the data buffer belong to no tensor"});
}

TEST_F(SafetensorsTest, BytesAfterTheLastTensorAreRejected) {
  expect_open_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(5, '\0')),
      {"bytes [4, 5) at the end of the data buffer belong to no tensor"});
  expect_open_error(file_bytes("{}", "x"), {"bytes [0, 1) at the end of the data buffer"});
}

TEST_F(SafetensorsTest, MetadataThatIsNotAnObjectOfStringsIsRejected) {
  expect_open_error(file_bytes(R"({"__metadata__":["a"]})"),
                    {"\"__metadata__\" is a JSON array, not an object of strings"});
  expect_open_error(file_bytes(R"({"__metadata__":{"epoch":3}})"),
                    {"\"__metadata__\" value of \"epoch\" is 3, not a string"});
}

TEST_F(SafetensorsTest, BoolBytesOtherThanZeroOrOneAreRejected) {
  const SafetensorsFile file = SafetensorsFile::open(write_file(
      "bool.safetensors",
      file_bytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", raw({1, 0, 2}))));
  try {
    file.tensor("m");
    ADD_FAILURE() << "read byte 2 as a bool";
  } catch (const Error& e) {
    expect_message(e.what(), file.path(), {"tensor \"m\" (BOOL) has byte 2 at element 2"});
  }
  bool called = false;
  try {
    file.read_into("m", [&](const at::Tensor&) { called = true; });
    ADD_FAILURE() << "read_into read byte 2 as a bool";
  } catch (const Error& e) {
    expect_message(e.what(), file.path(), {"tensor \"m\" (BOOL) has byte 2 at element 2"});
  }
  EXPECT_FALSE(called);
}

// ---- robustness ---------------------------------------------------------------------------------

TEST_F(SafetensorsTest, CorruptedFilesAreRejectedOrReadSafely) {
  // Random byte changes and truncations of a valid file: open() either throws attnkit::Error or
  // gives entries that tensor() can read; nothing else (no crash, no other exception type).
  const std::string valid = serialize_safetensors({{"weight", at::randn({3, 4})},
                                                   {"ids", at::arange(5)},
                                                   {"mask", at::ones({2}, at::kBool)},
                                                   {"half", at::ones({0, 3}, at::kHalf)},
                                                   {"step", at::scalar_tensor(7, at::kLong)}},
                                                  {{"format", "pt"}});
  constexpr char kReplacements[] = "{}[]\":,0123456789-.eE \0\xff";  // JSON syntax, NUL, non-UTF-8
  const std::string_view replacements(kReplacements, sizeof(kReplacements) - 1);
  std::mt19937 random(1234);
  int opened = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = valid;
    const int changes = 1 + static_cast<int>(random() % 3);
    for (int c = 0; c < changes; ++c) {
      const size_t position = random() % bytes.size();
      bytes[position] = random() % 2 ? replacements[random() % replacements.size()]
                                     : static_cast<char>(random() % 256);
    }
    if (trial % 10 == 0) bytes.resize(random() % bytes.size());
    const std::string file = write_file("corrupt.safetensors", bytes);
    try {
      const SafetensorsFile opened_file = SafetensorsFile::open(file);
      ++opened;
      for (const TensorEntry& entry : opened_file.entries()) {
        try {
          const at::Tensor tensor = opened_file.tensor(entry.name);
          EXPECT_EQ(static_cast<uint64_t>(tensor.nbytes()), entry.end - entry.begin);
        } catch (const Error&) {  // BOOL bytes other than 0/1
          EXPECT_EQ(entry.scalar_type, at::kBool);
        }
      }
    } catch (const Error&) {
    }
    fs::remove(file);
  }
  EXPECT_GT(opened, 0);  // some changes (in tensor data, or harmless ones) keep the file valid
}

}  // namespace
}  // namespace attnkit::io
