#pragma once
// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of UTF-8 JSON
//   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<value>", ...}}            (metadata optional)
// then the data buffer; offsets are relative to the buffer's start, data is C-ordered and
// little-endian. Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::io {

// One tensor's header entry, with offsets relative to the data buffer.
struct TensorEntry {
  std::string name;
  std::string dtype;  // as in the file, e.g. "BF16"
  at::ScalarType scalar_type = at::kFloat;
  std::vector<int64_t> shape;  // [] for a 0-dim tensor (1 element)
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A memory-mapped safetensors file (a private mapping: nothing attnkit does writes to the file). open() validates the whole header, so that every
// later call either succeeds or reports an unknown name; the data buffer is only read by tensor().
// Validation follows the reference Rust implementation: the entries' byte ranges must tile the
// data buffer exactly (no overlap, no gap, nothing after the last tensor); in addition, repeated
// JSON keys are errors. Unknown keys inside an entry are ignored, as there. A file replaced by
// save_safetensors (a rename) while open keeps being read as it was; a file truncated in place
// while open is the usual mmap hazard (SIGBUS), which attnkit's own writers never cause.
class SafetensorsFile {
 public:
  // Throws attnkit::Error "<path>: <what is wrong>".
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }  // in data-offset order
  std::vector<std::string> names() const;                               // sorted
  bool contains(const std::string& name) const;
  // Throws attnkit::Error naming the file and some of the tensors it has if `name` is unknown.
  const TensorEntry& entry(const std::string& name) const;
  // A CPU tensor owning a copy of the bytes. Throws attnkit::Error as entry() does, and for BOOL
  // bytes other than 0 and 1.
  at::Tensor tensor(const std::string& name) const;
  // Calls `use` with a tensor over the file's mapped bytes (no copy; read-only, valid during the
  // call only), then lets the pages it read go as tensor() does: a loader copies each tensor once,
  // into its parameter, instead of into a temporary first. Throws as tensor() does.
  void read_into(const std::string& name, const std::function<void(const at::Tensor&)>& use) const;
  // A tensor over the file's mapped bytes that keeps the mapping alive (no copy): the mapping is
  // private and writable, so a write into the tensor copies the pages it touches (copy-on-write)
  // and never reaches the file; the mapping stays while this file or any such tensor does. A
  // loader adopts it as a parameter's memory (models::DeferredInit::adopt) instead of copying:
  // the model is ready without first writes to fresh pages (issue 43's start). Undefined where
  // the bytes are not shared: BOOL (its bytes are checked by copying), no elements, or an address
  // off a 64-byte line (kMappableAlignment): the decoding kernels read such rows across cache
  // lines, measured 5-10% slower on the Marian model (2026-11-29), so those tensors are copied;
  // files written with SafetensorsLayout::kMappable have every tensor of whole lines on a line.
  // Fills the page tables now (MADV_POPULATE_READ: the first forward takes no faults). When the
  // tensor's storage goes, the pages wholly inside it leave the process, written ones included:
  // so take each entry once, and neither tensor() nor read_into() it while the shared tensor lives.
  at::Tensor shared_tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;
  // The tensor's bytes in the mapping, BOOL bytes checked.
  const unsigned char* checked_bytes(const TensorEntry& found) const;

  std::string path_;
  std::shared_ptr<const unsigned char> mapping_;  // munmaps when the last owner goes
  size_t mapping_size_ = 0;
  const unsigned char* data_ = nullptr;  // the data buffer, inside the mapping
  std::vector<TensorEntry> entries_;
  std::map<std::string, size_t> index_by_name_;  // -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// All tensors of a file, by name.
std::map<std::string, at::Tensor> load_safetensors(const std::string& path);

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The bytes of a safetensors file, laid out like the reference Rust implementation (so that the
// same tensors give the same bytes): entries ordered by dtype (I64 F64 F32 I32 BF16 F16 I16 I8 U8
// BOOL) then by name, JSON header padded with spaces to a multiple of 8 bytes, "__metadata__"
// (first) only if `metadata` is not empty. Tensors are written contiguous, from the CPU. Names must
// be non-empty, unique, valid UTF-8 and not "__metadata__"; otherwise, or for an unsupported dtype
// or layout, throws attnkit::Error.
//
// kMappable (what attnkit's model and checkpoint files use) instead lays the file out for
// SafetensorsFile::shared_tensor: the header is padded with spaces so that the data buffer starts
// on a 64-byte line, and the tensors whose byte size is a multiple of 64 come first (by dtype, then
// name), so each starts on a line of its own; the rest follow (by dtype, then name). Any reader
// takes either file (the order and padding are the writer's choice in the format).
enum class SafetensorsLayout { kReference, kMappable };
inline constexpr size_t kMappableAlignment = 64;  // bytes: a cache line
std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata = {},
                                  SafetensorsLayout layout = SafetensorsLayout::kReference);

// Writes serialize_safetensors' bytes to `path` atomically (write_file_atomically), streaming the
// tensors instead of building the whole file in memory.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      SafetensorsLayout layout = SafetensorsLayout::kReference);

}  // namespace attnkit::io
