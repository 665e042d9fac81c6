#pragma once
// GGUF files (llama.cpp's model format, versions 2 and 3, little-endian): a header, typed
// metadata (key -> value, values possibly arrays of arrays), tensor infos (name, dimensions, ggml
// type, offset), then the aligned data section. No LibTorch.
//
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count
//   kv_count  x { string key, u32 value_type, value }
//   tensor_count x { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section
// where a string is u64 length + bytes, and an array value is u32 element_type, u64 count, and
// count values of that type.
//
// GgufFile::open maps the file read-only (no copy) and checks everything before it returns: every
// count, length, dimension, size and offset against the file's size (overflow-safe), so that a
// truncated or hostile file gives one attnkit::Error line naming what is wrong, never a crash or
// an allocation larger than a small multiple of the file. A file truncated in place while open is
// the usual mmap hazard (SIGBUS).
#include "attnkit/formats/ggml_types.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attnkit::formats {

// GGUF metadata value types, as numbered in the file.
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// "UINT32", ... as the gguf package names them; "type N" for a number outside the enum.
std::string gguf_type_name(uint32_t type);

// One metadata value: a scalar, a string or an array. Strings are bytes as the file has them
// (GGUF asks for UTF-8 but attnkit does not check it). Values view the mapped file: they stay
// valid while their GgufFile lives.
class GgufValue {
 public:
  GgufType type() const { return type_; }
  bool is_integer() const;  // UINT8 ... INT64
  bool is_float() const;    // FLOAT32, FLOAT64

  // Scalars. Each throws attnkit::Error "a TYPE value is not ..." for another type.
  int64_t to_integer() const;        // any integer type (a UINT64 above INT64_MAX throws)
  uint64_t to_unsigned() const;      // any integer type with a value >= 0
  double to_number() const;          // any integer or float type
  float to_float32() const;          // FLOAT32 only
  bool to_bool() const;              // BOOL (a byte other than 0 or 1 is read as true)
  std::string_view to_string() const;  // STRING

  // Arrays (ARRAY only; each throws attnkit::Error otherwise).
  GgufType element_type() const;
  size_t size() const;
  // Element i (< size()): a scalar, a string or an array value.
  GgufValue element(size_t i) const;
  // Depth of nested arrays: 0 for a scalar or string, 1 for an array of scalars or strings, ...
  int depth() const;

 private:
  friend class GgufFile;
  friend class GgufParser;
  GgufType type_ = GgufType::UINT8;
  GgufType element_type_ = GgufType::UINT8;  // arrays
  uint64_t count_ = 0;                       // arrays: number of elements
  std::string_view bytes_;  // a scalar's bytes, a string's text, or a scalar array's elements
  // the elements of an array of strings or of arrays (shared: copies of values stay cheap)
  std::shared_ptr<const std::vector<GgufValue>> elements_;
};

struct GgufMetadataEntry {
  std::string key;
  GgufValue value;
  uint64_t record_offset = 0;  // where its record (the key's length) starts in the file
};

struct GgufTensorInfo {
  std::string name;
  uint32_t type = 0;            // a GgmlType number; ggml_type_name(type) spells it
  std::vector<uint64_t> dims;   // ggml order: dims[0] is the row (fastest-varying) dimension
  uint64_t offset = 0;          // of its data, from the start of the data section
  uint64_t elements = 0;        // product of dims (1 for no dims)
  uint64_t bytes = 0;           // elements / block size * block bytes
  uint64_t record_offset = 0;   // where its info record (the name's length) starts in the file

  // The dimensions outermost first, as PyTorch and transformers order them (dims reversed).
  std::vector<int64_t> shape() const;
};

class GgufFile {
 public:
  // Throws attnkit::Error "PATH: WHAT IS WRONG".
  static GgufFile open(const std::string& path);

  GgufFile(GgufFile&& other) noexcept = default;
  GgufFile& operator=(GgufFile&& other) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile() = default;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }      // general.alignment, or 32
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts
  uint64_t file_size() const { return size_; }

  // ---- metadata ----
  const std::vector<GgufMetadataEntry>& metadata() const { return metadata_; }  // file order
  const GgufValue* find(std::string_view key) const;  // null when absent
  // Typed getters: each throws attnkit::Error "PATH: no metadata key 'KEY'" when absent and
  // "PATH: metadata key 'KEY' is TYPE, expected WHAT" for a value of another type.
  const GgufValue& get(std::string_view key) const;
  std::string_view get_string(std::string_view key) const;  // STRING
  uint32_t get_uint32(std::string_view key) const;          // UINT32
  int64_t get_integer(std::string_view key) const;          // any integer type fitting int64
  float get_float32(std::string_view key) const;            // FLOAT32
  double get_number(std::string_view key) const;            // any integer or float type
  bool get_bool(std::string_view key) const;                // BOOL
  std::vector<std::string_view> get_strings(std::string_view key) const;  // ARRAY of STRING
  std::vector<int64_t> get_integers(std::string_view key) const;  // ARRAY of an integer type
  std::vector<float> get_float32s(std::string_view key) const;    // ARRAY of FLOAT32

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // file order
  const GgufTensorInfo* find_tensor(std::string_view name) const;  // null when absent
  // Throws attnkit::Error "PATH: no tensor 'NAME' (the file has N tensors: A, B, ...)".
  const GgufTensorInfo& tensor(std::string_view name) const;
  // The tensor's bytes in the mapped file (tensor.bytes of them). `tensor` must be one of this
  // file's tensors(), as for dequantize.
  const uint8_t* tensor_data(const GgufTensorInfo& tensor) const;
  // The tensor as float32 values in ggml order (elements of them). Throws attnkit::Error
  // "cannot convert tensor 'NAME' of PATH: ggml type T is not supported (...)".
  std::vector<float> dequantize(const GgufTensorInfo& tensor) const;
  void dequantize(const GgufTensorInfo& tensor, float* out) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  struct Unmap {  // munmap of the whole file (no member initialiser: GCC would then not see it
    size_t size;   // as default-constructible inside GgufFile)
    void operator()(const uint8_t* address) const noexcept;
  };
  [[noreturn]] void type_error(std::string_view key, const GgufValue& value,
                               std::string_view expected) const;

  std::string path_;
  std::unique_ptr<const uint8_t, Unmap> map_;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufMetadataEntry> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// The deepest nesting of arrays GgufFile::open accepts (an array of arrays is depth 2).
constexpr int kGgufMaxArrayDepth = 8;
// The most dimensions a tensor may have (ggml's GGML_MAX_DIMS).
constexpr uint32_t kGgufMaxDims = 4;

}  // namespace attnkit::formats
