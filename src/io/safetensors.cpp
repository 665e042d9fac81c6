#include "attnkit/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/text/unicode.h"

// Tensor bytes are copied between files and tensors as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace attnkit::io {
namespace {

using json = nlohmann::json;

constexpr size_t kLengthFieldSize = 8;
constexpr uint64_t kMaxHeaderSize = 100'000'000;  // the reference implementation's limit
constexpr std::string_view kMetadataKey = "__metadata__";
// serde_json, the reference implementation's parser, refuses 128 nested arrays/objects (the
// outermost object counts); so does attnkit, which also bounds its own work on deep input.
constexpr size_t kMaxJsonDepth = 127;

struct Dtype {
  const char* name;
  at::ScalarType scalar_type;
  uint64_t size;        // bytes per element
  int layout_position;  // where the reference implementation puts it in a file (0 = first)
};

// The reference implementation orders tensors in a file by its Dtype enum, which lists dtypes by
// increasing alignment, in descending order.
constexpr Dtype kDtypes[] = {
    {"F64", at::kDouble, 8, 1},    {"F32", at::kFloat, 4, 2}, {"F16", at::kHalf, 2, 5},
    {"BF16", at::kBFloat16, 2, 4}, {"I64", at::kLong, 8, 0},  {"I32", at::kInt, 4, 3},
    {"I16", at::kShort, 2, 6},     {"I8", at::kChar, 1, 7},   {"U8", at::kByte, 1, 8},
    {"BOOL", at::kBool, 1, 9},
};

const Dtype* find_dtype(std::string_view name) {
  for (const Dtype& dtype : kDtypes)
    if (name == dtype.name) return &dtype;
  return nullptr;
}

const Dtype* find_dtype(at::ScalarType scalar_type) {
  for (const Dtype& dtype : kDtypes)
    if (scalar_type == dtype.scalar_type) return &dtype;
  return nullptr;
}

std::string supported_dtypes() {
  std::vector<std::string> names;
  for (const Dtype& dtype : kDtypes)
    names.push_back(fmt::format("{} ({})", dtype.name, c10::toString(dtype.scalar_type)));
  return fmt::format("{}", fmt::join(names, ", "));
}

// Runs f(); an attnkit::Error it throws gets "<context>: " in front of its message.
template <typename F>
auto with_context(const std::string& context, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", context, e.what()));
  }
}

void check_utf8(std::string_view what, const std::string& text) {
  const size_t position = text::unicode::find_invalid_utf8(text);
  if (position != std::string_view::npos)
    throw Error(fmt::format("{} is not valid UTF-8 (byte {} of {:?})", what, position, text));
}

// ---- reading ---------------------------------------------------------------------------------

uint64_t read_u64_le(const unsigned char* bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < kLengthFieldSize; ++i) value |= uint64_t{bytes[i]} << (8 * i);
  return value;
}

// nlohmann::json keeps one of two equal keys silently; a header naming a tensor twice would then
// hide a tensor, so any repeated key in any object is an error.
json parse_header_json(std::string_view header) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string top_level_key;
  size_t open_containers = 0;
  const json::parser_callback_t reject_repeated_keys = [&](int, json::parse_event_t event,
                                                           json& parsed) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      if (++open_containers > kMaxJsonDepth)
        throw Error(fmt::format("header nests arrays and objects deeper than {} levels", kMaxJsonDepth));
    } else if (event == json::parse_event_t::array_end) {
      --open_containers;
    }
    if (event == json::parse_event_t::object_start) {
      keys_of_open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      --open_containers;
      keys_of_open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      const bool top_level = keys_of_open_objects.size() == 1;
      if (top_level) top_level_key = key;
      if (!keys_of_open_objects.back().insert(key).second) {
        if (top_level && key == kMetadataKey) throw Error("header has \"__metadata__\" twice");
        if (top_level) throw Error(fmt::format("header names tensor {:?} twice", key));
        throw Error(fmt::format("header entry {:?} has key {:?} twice", top_level_key, key));
      }
    }
    return true;
  };
  try {
    return json::parse(header.begin(), header.end(), reject_repeated_keys);
  } catch (const Error&) {
    throw;  // from reject_repeated_keys
  } catch (const std::exception& e) {  // json parse_error, or out_of_range for 1e400
    // Drop the "[json.exception.parse_error.101] " prefix.
    std::string_view message = e.what();
    if (const size_t end = message.find("] "); end != std::string_view::npos)
      message.remove_prefix(end + 2);
    throw Error(fmt::format("header is not valid JSON: {}", message));
  }
}

const json& field(const std::string& tensor, const json& entry, const char* key) {
  const auto it = entry.find(key);
  if (it == entry.end())
    throw Error(fmt::format("tensor {:?}: the entry has no \"{}\"", tensor, key));
  return *it;
}

[[noreturn]] void fail_field_type(const std::string& tensor, const char* key, const json& value,
                                  const char* expected) {
  throw Error(
      fmt::format("tensor {:?}: \"{}\" is {} but must be {}", tensor, key, value.dump(), expected));
}

TensorEntry read_entry(const std::string& name, const json& value, uint64_t data_size) {
  if (!value.is_object())
    throw Error(
        fmt::format("tensor {:?}: the entry is a JSON {}, not an object", name, value.type_name()));
  TensorEntry entry;
  entry.name = name;

  const json& dtype_value = field(name, value, "dtype");
  if (!dtype_value.is_string()) fail_field_type(name, "dtype", dtype_value, "a string");
  entry.dtype = dtype_value.get<std::string>();
  const Dtype* dtype = find_dtype(entry.dtype);
  if (dtype == nullptr)
    throw Error(fmt::format("tensor {:?}: dtype {:?} is not supported (supported: {})", name,
                            entry.dtype, supported_dtypes()));
  entry.scalar_type = dtype->scalar_type;

  const json& shape = field(name, value, "shape");
  if (!shape.is_array()) fail_field_type(name, "shape", shape, "an array of dimensions");
  // Sizes are multiplied with overflow checks. ATen multiplies the dimensions (each at least 1) for
  // the strides, so that product must fit int64 too, even when a 0 makes the tensor empty.
  int64_t elements = 1;
  int64_t extent = 1;
  for (const json& dim : shape) {
    // Unsigned only: "-0" is a signed JSON integer, which the reference implementation refuses too.
    if (dim.is_number_integer() && !dim.is_number_unsigned())
      fail_field_type(name, "shape", shape, "an array of non-negative dimensions");
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})
      fail_field_type(name, "shape", shape, "an array of integers in [0, 2^63)");
    const int64_t size = dim.get<int64_t>();
    entry.shape.push_back(size);
    if (__builtin_mul_overflow(extent, std::max<int64_t>(size, 1), &extent))
      throw Error(
          fmt::format("tensor {:?}: shape {} has too many elements for int64", name, shape.dump()));
    elements *= size;  // <= extent
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements), dtype->size, &bytes))
    throw Error(
        fmt::format("tensor {:?}: shape {} has too many bytes for uint64", name, shape.dump()));

  const json& offsets = field(name, value, "data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail_field_type(name, "data_offsets", offsets, "[begin, end] (non-negative integers)");
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.begin > entry.end)
    throw Error(
        fmt::format("tensor {:?}: data_offsets {} begin after they end", name, offsets.dump()));
  if (entry.end > data_size)
    throw Error(fmt::format("tensor {:?}: data_offsets {} end beyond the data buffer ({} bytes)",
                            name, offsets.dump(), data_size));
  if (entry.end - entry.begin != bytes)
    throw Error(
        fmt::format("tensor {:?}: data_offsets {} span {} bytes but {} of shape {} needs {}", name,
                    offsets.dump(), entry.end - entry.begin, entry.dtype, shape.dump(), bytes));
  return entry;
}

std::map<std::string, std::string> read_metadata(const json& value) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;  // the reference implementation reads null as "none"
  if (!value.is_object())
    throw Error(
        fmt::format("\"__metadata__\" is a JSON {}, not an object of strings", value.type_name()));
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      throw Error(
          fmt::format("\"__metadata__\" value of {:?} is {}, not a string", key, item.dump()));
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// Sorts entries by offsets and checks that they tile [0, data_size) exactly, as the reference
// implementation requires: no overlap, no gap, no unused bytes at the end.
void sort_and_check_tiling(std::vector<TensorEntry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;  // entries so far cover [0, covered)
  for (size_t i = 0; i < entries.size(); ++i) {
    const TensorEntry& entry = entries[i];
    if (entry.begin < covered) {
      const TensorEntry& previous = entries[i - 1];
      throw Error(fmt::format("tensor {:?} (bytes [{}, {})) overlaps tensor {:?} (bytes [{}, {}))",
                              entry.name, entry.begin, entry.end, previous.name, previous.begin,
                              previous.end));
    }
    if (entry.begin > covered)
      throw Error(fmt::format(
          "bytes [{}, {}) of the data buffer belong to no tensor (a gap before tensor {:?})",
          covered, entry.begin, entry.name));
    covered = entry.end;
  }
  if (covered != data_size)
    throw Error(fmt::format("bytes [{}, {}) at the end of the data buffer belong to no tensor",
                            covered, data_size));
}

// A private mapping of a whole file, readable and writable (a write copies the page: the file never
// changes); returns {owner of the mapping, size}.
std::pair<std::shared_ptr<const unsigned char>, size_t> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot open: {}", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }  // a mapping outlives its descriptor
  } closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw Error(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(status.st_mode)) throw Error("not a regular file");
  const auto size = static_cast<size_t>(status.st_size);
  if (size < kLengthFieldSize)
    throw Error(fmt::format(
        "the file has {} bytes, fewer than the 8-byte header length a safetensors file starts with",
        size));
  void* address = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (address == MAP_FAILED) throw Error(fmt::format("cannot mmap: {}", std::strerror(errno)));
  std::shared_ptr<const unsigned char> owner(static_cast<const unsigned char*>(address),
                                             [size](const unsigned char* p) {
                                               ::munmap(const_cast<unsigned char*>(p), size);
                                             });
  return {std::move(owner), size};
}

// ---- writing ---------------------------------------------------------------------------------

// What serialize_safetensors and save_safetensors write: the header, then the tensors' bytes.
struct PreparedFile {
  std::string header;               // the 8-byte length, then the padded JSON
  std::vector<at::Tensor> tensors;  // as given, in file order
  uint64_t data_size = 0;
};

PreparedFile prepare(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata,
                     SafetensorsLayout layout) {
  struct Item {
    const std::string* name;
    const Dtype* dtype;
    const at::Tensor* tensor;
  };
  std::vector<Item> items;
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty()) throw Error("a tensor name is empty");
    check_utf8("tensor name", name);
    if (name == kMetadataKey)
      throw Error("\"__metadata__\" is reserved for metadata, not a tensor name");
    if (!names.insert(name).second)
      throw Error(fmt::format("tensor name {:?} appears twice", name));
    if (!tensor.defined()) throw Error(fmt::format("tensor {:?} is undefined", name));
    if (tensor.layout() != at::kStrided)
      throw Error(
          fmt::format("tensor {:?} has layout {}; only dense (strided) tensors can be saved", name,
                      fmt::streamed(tensor.layout())));
    const Dtype* dtype = find_dtype(tensor.scalar_type());
    if (dtype == nullptr)
      throw Error(fmt::format("tensor {:?}: dtype {} cannot be saved (supported: {})", name,
                              c10::toString(tensor.scalar_type()), supported_dtypes()));
    items.push_back({&name, dtype, &tensor});
  }
  for (const auto& [key, value] : metadata) {
    check_utf8("metadata key", key);
    check_utf8(fmt::format("metadata value of {:?}", key), value);
  }

  // kMappable: tensors of whole 64-byte lines first (each then starts on a line), the rest after.
  const bool mappable = layout == SafetensorsLayout::kMappable;
  auto off_lines = [&](const Item& item) {
    return mappable && (item.tensor->numel() * item.dtype->size) % kMappableAlignment != 0;
  };
  std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    const bool a_off = off_lines(a), b_off = off_lines(b);
    return std::tie(a_off, a.dtype->layout_position, *a.name) <
           std::tie(b_off, b.dtype->layout_position, *b.name);
  });

  PreparedFile file;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();  // keeps insertion order
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  for (const Item& item : items) {
    const uint64_t bytes = static_cast<uint64_t>(item.tensor->numel()) * item.dtype->size;
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = item.dtype->name;
    entry["shape"] = item.tensor->sizes().vec();
    entry["data_offsets"] = nlohmann::ordered_json::array({file.data_size, file.data_size + bytes});
    header[*item.name] = std::move(entry);
    file.data_size += bytes;
    file.tensors.push_back(*item.tensor);
  }
  std::string json_text = header.dump();
  // The data buffer starts 8-aligned (kMappable: on a 64-byte line), after the 8-byte length.
  const size_t line = mappable ? kMappableAlignment : 8;
  json_text.append((line - (kLengthFieldSize + json_text.size()) % line) % line, ' ');
  for (size_t i = 0; i < kLengthFieldSize; ++i)
    file.header.push_back(static_cast<char>((uint64_t{json_text.size()} >> (8 * i)) & 0xFF));
  file.header += json_text;
  return file;
}

// Calls write(data, size) with the header, then with each tensor's bytes, until it returns false.
// Tensors are made contiguous on the CPU one at a time, so at most one copy is alive.
template <typename Write>
void write_prepared(const PreparedFile& file, Write&& write) {
  if (!write(file.header.data(), file.header.size())) return;
  for (const at::Tensor& tensor : file.tensors) {
    const at::Tensor data = tensor.detach().to(at::kCPU).contiguous();
    if (data.nbytes() > 0 && !write(static_cast<const char*>(data.data_ptr()), data.nbytes()))
      return;
  }
}

}  // namespace

// ---- SafetensorsFile ---------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;  // unmaps on the way out if validation throws
  file.path_ = path;
  with_context(path, [&] {
    std::tie(file.mapping_, file.mapping_size_) = map_file(path);
    const uint64_t available = file.mapping_size_ - kLengthFieldSize;
    const uint64_t header_size = read_u64_le(file.mapping_.get());
    if (header_size > kMaxHeaderSize)
      throw Error(fmt::format("header length {} exceeds the limit of {} bytes", header_size,
                              kMaxHeaderSize));
    if (header_size > available)
      throw Error(fmt::format("header length {} exceeds the {} bytes that follow it", header_size,
                              available));
    const std::string_view header(reinterpret_cast<const char*>(file.mapping_.get()) + kLengthFieldSize,
                                  header_size);
    if (const size_t position = text::unicode::find_invalid_utf8(header);
        position != std::string_view::npos)
      throw Error(fmt::format("header is not valid UTF-8 (byte {})", position));
    // nlohmann::json skips a leading byte order mark; JSON (and the reference implementation) does not.
    if (header.rfind("\xEF\xBB\xBF", 0) == 0)
      throw Error("header is not valid JSON: it starts with a UTF-8 byte order mark");
    // nlohmann::json would take a NUL byte for the end of the input and ignore the rest.
    if (const size_t position = header.find('\0'); position != std::string_view::npos)
      throw Error(fmt::format("header is not valid JSON: it has a NUL byte (byte {})", position));
    const json root = parse_header_json(header);
    if (!root.is_object())
      throw Error(fmt::format("header is a JSON {}, not an object", root.type_name()));

    const uint64_t data_size = available - header_size;
    for (const auto& [key, value] : root.items()) {
      if (key == kMetadataKey)
        file.metadata_ = read_metadata(value);
      else
        file.entries_.push_back(read_entry(key, value, data_size));
    }
    sort_and_check_tiling(file.entries_, data_size);
    file.data_ = file.mapping_.get() + kLengthFieldSize + header_size;
    for (size_t i = 0; i < file.entries_.size(); ++i)
      file.index_by_name_[file.entries_[i].name] = i;
  });
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::move(other.mapping_);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    entries_ = std::move(other.entries_);
    index_by_name_ = std::move(other.index_by_name_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  mapping_.reset();
  mapping_size_ = 0;
  data_ = nullptr;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto& [name, index] : index_by_name_) names.push_back(name);
  return names;  // sorted, as the map is
}

bool SafetensorsFile::contains(const std::string& name) const {
  return index_by_name_.count(name) != 0;
}

const TensorEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = index_by_name_.find(name);
  if (it != index_by_name_.end()) return entries_[it->second];
  if (index_by_name_.empty())
    throw Error(fmt::format("{}: no tensor named {:?} (the file has no tensors)", path_, name));
  constexpr size_t kNamesShown = 10;
  std::vector<std::string> shown;
  for (const auto& [known, index] : index_by_name_) {
    if (shown.size() == kNamesShown) break;
    shown.push_back(fmt::format("{:?}", known));
  }
  const size_t count = index_by_name_.size();
  if (count > kNamesShown) shown.push_back(fmt::format("... ({} more)", count - kNamesShown));
  throw Error(fmt::format("{}: no tensor named {:?} (the file has {} tensor{}: {})", path_, name,
                          count, count == 1 ? "" : "s", fmt::join(shown, ", ")));
}

namespace {

#ifdef MADV_POPULATE_READ
constexpr int kPopulateRead = MADV_POPULATE_READ;
#else
constexpr int kPopulateRead = 22;  // Linux 5.14's value; older C library headers lack the name
#endif

// The pages wholly inside [bytes, bytes + size) leave the process (a later read faults them in
// again from the file), so a model read tensor by tensor does not hold the whole file resident
// beside itself.
void release_pages(const unsigned char* bytes, size_t size) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(bytes) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(bytes) + size) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace

const unsigned char* SafetensorsFile::checked_bytes(const TensorEntry& found) const {
  const unsigned char* bytes = data_ + found.begin;
  const size_t size = found.end - found.begin;
  if (found.scalar_type == at::kBool) {
    // Any other byte would be an invalid C++ bool inside the tensor.
    const unsigned char* invalid =
        std::find_if(bytes, bytes + size, [](unsigned char b) { return b > 1; });
    if (invalid != bytes + size)
      throw Error(
          fmt::format("{}: tensor {:?} (BOOL) has byte {} at element {}; BOOL bytes must be 0 or 1",
                      path_, found.name, *invalid, invalid - bytes));
  }
  return bytes;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorEntry& found = entry(name);
  const unsigned char* bytes = checked_bytes(found);
  const size_t size = found.end - found.begin;
  at::Tensor tensor = at::empty(found.shape, at::TensorOptions().dtype(found.scalar_type));
  if (size > 0) std::memcpy(tensor.data_ptr(), bytes, size);
  release_pages(bytes, size);
  return tensor;
}

void SafetensorsFile::read_into(const std::string& name, const std::function<void(const at::Tensor&)>& use) const {
  const TensorEntry& found = entry(name);
  const unsigned char* bytes = checked_bytes(found);
  const size_t size = found.end - found.begin;
  // A tensor of no elements gets its own (empty) storage: from_blob needs no address then.
  if (size == 0) {
    use(at::empty(found.shape, at::TensorOptions().dtype(found.scalar_type)));
    return;
  }
  // Unaligned bytes (a safetensors file aligns its data buffer, not each tensor) are copied: ATen's
  // kernels may assume an element's alignment.
  const size_t element = c10::elementSize(found.scalar_type);
  if (reinterpret_cast<uintptr_t>(bytes) % element != 0) {
    use(tensor(name));
    return;
  }
  use(at::from_blob(const_cast<unsigned char*>(bytes), found.shape, at::TensorOptions().dtype(found.scalar_type)));
  release_pages(bytes, size);
}

at::Tensor SafetensorsFile::shared_tensor(const std::string& name) const {
  const TensorEntry& found = entry(name);
  if (found.scalar_type == at::kBool || found.end == found.begin) return {};
  const unsigned char* bytes = data_ + found.begin;
  if (reinterpret_cast<uintptr_t>(bytes) % kMappableAlignment != 0) return {};
  const size_t size = found.end - found.begin;
  // Page tables filled now (file pages already cached are mapped, others read), so that the first
  // forward takes no page faults; a kernel without MADV_POPULATE_READ (before 5.14) faults them in
  // on first use instead.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(bytes) / page * page;
  ::madvise(reinterpret_cast<void*>(first), reinterpret_cast<uintptr_t>(bytes) + size - first,
            kPopulateRead);
  // When the tensor goes (a parameter replaced, e.g. by its int8 form), its pages leave the
  // process, as tensor()'s do; the mapping itself goes with its last owner.
  return at::from_blob(const_cast<unsigned char*>(bytes), found.shape,
                       [owner = mapping_, bytes, size](void*) { release_pages(bytes, size); },
                       at::TensorOptions().dtype(found.scalar_type));
}

// ---- load, save, serialize ---------------------------------------------------------------------

std::map<std::string, at::Tensor> load_safetensors(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> tensors;
  for (const TensorEntry& entry : file.entries())
    tensors.emplace(entry.name, file.tensor(entry.name));
  return tensors;
}

std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata,
                                  SafetensorsLayout layout) {
  const PreparedFile file =
      with_context("serialize_safetensors", [&] { return prepare(tensors, metadata, layout); });
  std::string bytes;
  bytes.reserve(file.header.size() + file.data_size);
  write_prepared(file, [&](const char* data, size_t size) {
    bytes.append(data, size);
    return true;
  });
  return bytes;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, SafetensorsLayout layout) {
  const PreparedFile file = with_context(path, [&] { return prepare(tensors, metadata, layout); });
  write_file_atomically(path, [&](std::FILE* out) {
    // After a failed write stop, leaving errno for write_file_atomically to report.
    write_prepared(file, [out](const char* data, size_t size) {
      return std::fwrite(data, 1, size, out) == size;
    });
  });
}

}  // namespace attnkit::io
