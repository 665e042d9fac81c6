// GGUF reader (include/attnkit/formats/gguf.h): a read-only mapping and one pass that checks every
// size against the bytes that remain before using it.
#include "attnkit/formats/gguf.h"

#include "attnkit/error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

namespace attnkit::formats {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kHeaderSize = 24;       // magic, version, tensor_count, kv_count
constexpr uint64_t kStringMinSize = 8;   // its length
constexpr uint64_t kArrayMinSize = 12;   // element type, count
constexpr uint64_t kTensorInfoMinSize = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset
constexpr uint64_t kKeyValueMinSize = 8 + 4 + 1;        // key length, type, a 1-byte value
// Counts are checked against the file's size, but a record in memory is larger than its least
// size in the file: reserve no more than this ahead of reading (vectors grow as records are read).
constexpr uint64_t kMaxReserve = 1 << 16;

// Bytes of a scalar value type; 0 for STRING, ARRAY and numbers outside the enum.
uint64_t scalar_size(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;
  }
}

bool known_type(uint32_t type) { return type <= static_cast<uint32_t>(GgufType::FLOAT64); }

bool integer_type(GgufType type) {
  switch (type) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default:
      return false;
  }
}

template <typename T>
T load_at(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// "'text'" with control bytes escaped and long names cut, for error messages.
std::string quoted(std::string_view text) {
  constexpr size_t kMax = 80;
  std::string shown = one_line(text.substr(0, kMax));
  if (text.size() > kMax) shown += "...";
  return "'" + shown + "'";
}

}  // namespace

// ---- parsing ----------------------------------------------------------------------------------

// Reads the file front to back; every read names what it reads, so a short file says which
// field ran past the end.
class GgufParser {
 public:
  GgufParser(GgufFile& file) : file_(file), begin_(reinterpret_cast<const char*>(file.map_.get())) {}

  void parse();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("{}: {}", file_.path_, what));
  }
  uint64_t remaining() const { return file_.size_ - position_; }
  // The next n bytes, or an error naming `what` when fewer remain.
  const char* take(uint64_t n, const std::string& what) {
    if (n > remaining())
      fail(fmt::format("truncated: {} at byte {} needs {} bytes, {} remain", what, position_, n,
                       remaining()));
    const char* p = begin_ + position_;
    position_ += n;
    return p;
  }
  uint32_t read_u32(const std::string& what) { return load_at<uint32_t>(take(4, what)); }
  uint64_t read_u64(const std::string& what) { return load_at<uint64_t>(take(8, what)); }
  std::string_view read_string(const std::string& what) {
    const uint64_t length = read_u64(what + " length");
    if (length > remaining())
      fail(fmt::format("{} at byte {} has length {}, past the end of the file ({} bytes remain)",
                       what, position_ - 8, length, remaining()));
    return {take(length, what), static_cast<size_t>(length)};
  }
  // A count of items each at least `min_size` bytes long must fit in what remains.
  void check_count(uint64_t count, uint64_t min_size, const std::string& what) const {
    if (count > remaining() / min_size)
      fail(fmt::format("{} is {}, but {} bytes remain (at least {} bytes each)", what, count,
                       remaining(), min_size));
  }
  // Reads `count` records (each at least min_size bytes) into `records`: read(record, i) fills
  // record i, whose record_offset is set.
  template <typename Record, typename Read>
  void read_records(std::vector<Record>& records, uint64_t count, uint64_t min_size,
                    const char* count_name, Read read) {
    check_count(count, min_size, count_name);
    records.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
    for (uint64_t i = 0; i < count; ++i) {
      Record record;
      record.record_offset = position_;
      read(record, i);
      records.push_back(std::move(record));
    }
  }
  GgufValue read_value(uint32_t type, int depth, const std::string& what);
  void read_metadata(uint64_t count);
  void read_tensor_infos(uint64_t count);
  void read_tensor_info(GgufTensorInfo& tensor, uint64_t i);
  void place_data_section();

  GgufFile& file_;
  const char* begin_;
  uint64_t position_ = 0;
};

GgufValue GgufParser::read_value(uint32_t type, int depth, const std::string& what) {
  if (!known_type(type)) fail(fmt::format("{} has unknown value type {}", what, type));
  GgufValue value;
  value.type_ = static_cast<GgufType>(type);
  if (const uint64_t size = scalar_size(type); size != 0) {
    value.bytes_ = {take(size, what), static_cast<size_t>(size)};
    return value;
  }
  if (value.type_ == GgufType::STRING) {
    value.bytes_ = read_string(what);
    return value;
  }
  // ARRAY
  if (depth >= kGgufMaxArrayDepth)
    fail(fmt::format("{} nests arrays deeper than {} levels", what, kGgufMaxArrayDepth));
  const uint32_t element_type = read_u32(what + " element type");
  if (!known_type(element_type))
    fail(fmt::format("{} has unknown element type {}", what, element_type));
  const uint64_t count = read_u64(what + " element count");
  value.element_type_ = static_cast<GgufType>(element_type);
  value.count_ = count;
  if (const uint64_t size = scalar_size(element_type); size != 0) {
    check_count(count, size, what + " element count");
    value.bytes_ = {take(count * size, what), static_cast<size_t>(count * size)};
    return value;
  }
  check_count(count, element_type == static_cast<uint32_t>(GgufType::STRING) ? kStringMinSize
                                                                             : kArrayMinSize,
              what + " element count");
  auto elements = std::make_shared<std::vector<GgufValue>>();
  elements->reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
  for (uint64_t i = 0; i < count; ++i) {
    if (element_type == static_cast<uint32_t>(GgufType::STRING) && remaining() >= kStringMinSize &&
        load_at<uint64_t>(begin_ + position_) <= remaining() - kStringMinSize) {
      // the common case (vocabularies): a string that fits, read without naming it
      GgufValue& string = elements->emplace_back();
      string.type_ = GgufType::STRING;
      const uint64_t length = load_at<uint64_t>(begin_ + position_);
      string.bytes_ = {begin_ + position_ + kStringMinSize, static_cast<size_t>(length)};
      position_ += kStringMinSize + length;
      continue;
    }
    elements->push_back(read_value(element_type, depth + 1, fmt::format("{}[{}]", what, i)));
  }
  value.elements_ = std::move(elements);
  return value;
}

void GgufParser::read_metadata(uint64_t count) {
  read_records(file_.metadata_, count, kKeyValueMinSize, "the metadata count",
               [&](GgufMetadataEntry& entry, uint64_t i) {
                 entry.key = std::string(read_string(fmt::format("metadata key {}", i)));
                 const std::string what = "metadata " + quoted(entry.key);
                 const uint32_t type = read_u32(what + " value type");
                 entry.value = read_value(type, 0, what);
               });
}

void GgufParser::read_tensor_infos(uint64_t count) {
  read_records(file_.tensors_, count, kTensorInfoMinSize, "the tensor count",
               [&](GgufTensorInfo& tensor, uint64_t i) { read_tensor_info(tensor, i); });
}

void GgufParser::read_tensor_info(GgufTensorInfo& tensor, uint64_t i) {
  tensor.name = std::string(read_string(fmt::format("tensor {} name", i)));
  const std::string what = "tensor " + quoted(tensor.name);
  const uint32_t n_dims = read_u32(what + " dimension count");
  if (n_dims > kGgufMaxDims)
    fail(fmt::format("{} has {} dimensions; at most {} are allowed", what, n_dims, kGgufMaxDims));
  tensor.elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t size = read_u64(what + " dimensions");
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (size != 0 && tensor.elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / size))
      fail(fmt::format("{} has dimensions whose product overflows 63 bits (dimension {} is {})",
                       what, d, size));
    tensor.dims.push_back(size);
    tensor.elements *= size;
  }
  tensor.type = read_u32(what + " type");
  tensor.offset = read_u64(what + " offset");
  const GgmlTypeTraits* traits = find_ggml_type(tensor.type);
  if (traits == nullptr) fail(fmt::format("{} has unknown ggml type {}", what, tensor.type));
  const uint64_t row = tensor.dims.empty() ? 1 : tensor.dims[0];
  if (row % traits->block_size != 0)
    fail(fmt::format("{} has rows of {} values, not a multiple of the {} block size {}", what, row,
                     traits->name, traits->block_size));
  // blocks * block_bytes overflows for some element counts below 2^63: checked, not trusted
  const uint64_t blocks = tensor.elements / traits->block_size;
  if (blocks > std::numeric_limits<uint64_t>::max() / traits->block_bytes)
    fail(fmt::format("{} needs more than 2^64 bytes", what));
  tensor.bytes = blocks * traits->block_bytes;
}

void GgufParser::place_data_section() {
  const uint64_t alignment = file_.alignment_;
  const uint64_t padding = (alignment - position_ % alignment) % alignment;
  file_.data_offset_ = position_ + padding;  // position_ <= size: no overflow
  const uint64_t data_size = file_.data_offset_ <= file_.size_ ? file_.size_ - file_.data_offset_ : 0;
  for (const GgufTensorInfo& tensor : file_.tensors_) {
    const std::string what = "tensor " + quoted(tensor.name);
    if (tensor.offset % alignment != 0)
      fail(fmt::format("{} has data offset {}, not a multiple of the alignment {}", what,
                       tensor.offset, alignment));
    if (tensor.offset > data_size || tensor.bytes > data_size - tensor.offset)
      fail(fmt::format("{} ({} bytes at data offset {}) ends past the end of the file: the data "
                       "section has {} bytes",
                       what, tensor.bytes, tensor.offset, data_size));
  }
}

void GgufParser::parse() {
  if (file_.size_ < kHeaderSize)
    fail(fmt::format("{} bytes, fewer than the {}-byte GGUF header", file_.size_, kHeaderSize));
  const uint32_t magic = read_u32("magic");
  if (magic != kMagic)
    fail(fmt::format("not a GGUF file (it starts with {}, not 'GGUF')",
                     quoted(std::string_view(begin_, 4))));
  const uint32_t version = read_u32("version");
  if ((version & 0xFFFFu) == 0 && version != 0)
    fail(fmt::format("a big-endian GGUF file (version field {:#010x}); only little-endian files are read",
                     version));
  if (version != 2 && version != 3)
    fail(fmt::format("GGUF version {} is not supported (2 and 3 are)", version));
  file_.version_ = version;
  const uint64_t tensor_count = read_u64("tensor count");
  const uint64_t metadata_count = read_u64("metadata count");
  // Counts are checked against the bytes after the header; the tensor infos come after the
  // metadata, so their count is checked again there.
  check_count(tensor_count, kTensorInfoMinSize, "the tensor count");
  read_metadata(metadata_count);
  for (size_t i = 0; i < file_.metadata_.size(); ++i)
    if (!file_.metadata_index_.emplace(file_.metadata_[i].key, i).second)
      fail(fmt::format("metadata key {} appears twice", quoted(file_.metadata_[i].key)));
  if (const GgufValue* alignment = file_.find("general.alignment")) {
    if (alignment->type() != GgufType::UINT32)
      fail(fmt::format("general.alignment is {}, expected UINT32",
                       gguf_type_name(static_cast<uint32_t>(alignment->type()))));
    const uint32_t value = load_at<uint32_t>(alignment->bytes_.data());
    if (value == 0 || (value & (value - 1)) != 0)
      fail(fmt::format("general.alignment is {}, not a power of two", value));
    file_.alignment_ = value;
  }
  read_tensor_infos(tensor_count);
  for (size_t i = 0; i < file_.tensors_.size(); ++i)
    if (!file_.tensor_index_.emplace(file_.tensors_[i].name, i).second)
      fail(fmt::format("tensor name {} appears twice", quoted(file_.tensors_[i].name)));
  place_data_section();
}

// ---- values -----------------------------------------------------------------------------------

std::string gguf_type_name(uint32_t type) {
  static constexpr const char* kNames[] = {"UINT8",   "INT8",  "UINT16", "INT16", "UINT32",
                                           "INT32",   "FLOAT32", "BOOL", "STRING", "ARRAY",
                                           "UINT64",  "INT64", "FLOAT64"};
  return known_type(type) ? kNames[type] : fmt::format("type {}", type);
}

bool GgufValue::is_integer() const { return integer_type(type_); }

bool GgufValue::is_float() const {
  return type_ == GgufType::FLOAT32 || type_ == GgufType::FLOAT64;
}

namespace {
[[noreturn]] void not_a(GgufType type, std::string_view expected) {
  throw Error(fmt::format("a {} value is not {}", gguf_type_name(static_cast<uint32_t>(type)),
                          expected));
}
}  // namespace

int64_t GgufValue::to_integer() const {
  const char* p = bytes_.data();
  switch (type_) {
    case GgufType::UINT8: return load_at<uint8_t>(p);
    case GgufType::INT8: return load_at<int8_t>(p);
    case GgufType::UINT16: return load_at<uint16_t>(p);
    case GgufType::INT16: return load_at<int16_t>(p);
    case GgufType::UINT32: return load_at<uint32_t>(p);
    case GgufType::INT32: return load_at<int32_t>(p);
    case GgufType::INT64: return load_at<int64_t>(p);
    case GgufType::UINT64: {
      const uint64_t value = load_at<uint64_t>(p);
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(fmt::format("UINT64 value {} does not fit in a signed 64-bit integer", value));
      return static_cast<int64_t>(value);
    }
    default: not_a(type_, "an integer");
  }
}

uint64_t GgufValue::to_unsigned() const {
  if (type_ == GgufType::UINT64) return load_at<uint64_t>(bytes_.data());
  const int64_t value = to_integer();
  if (value < 0)
    throw Error(fmt::format("{} value {} is negative",
                            gguf_type_name(static_cast<uint32_t>(type_)), value));
  return static_cast<uint64_t>(value);
}

double GgufValue::to_number() const {
  if (type_ == GgufType::FLOAT32) return load_at<float>(bytes_.data());
  if (type_ == GgufType::FLOAT64) return load_at<double>(bytes_.data());
  if (type_ == GgufType::UINT64) return static_cast<double>(load_at<uint64_t>(bytes_.data()));
  if (!is_integer()) not_a(type_, "a number");
  return static_cast<double>(to_integer());
}

float GgufValue::to_float32() const {
  if (type_ != GgufType::FLOAT32) not_a(type_, "FLOAT32");
  return load_at<float>(bytes_.data());
}

bool GgufValue::to_bool() const {
  if (type_ != GgufType::BOOL) not_a(type_, "BOOL");
  return bytes_[0] != 0;
}

std::string_view GgufValue::to_string() const {
  if (type_ != GgufType::STRING) not_a(type_, "STRING");
  return bytes_;
}

GgufType GgufValue::element_type() const {
  if (type_ != GgufType::ARRAY) not_a(type_, "an ARRAY");
  return element_type_;
}

size_t GgufValue::size() const {
  if (type_ != GgufType::ARRAY) not_a(type_, "an ARRAY");
  return static_cast<size_t>(count_);
}

GgufValue GgufValue::element(size_t i) const {
  if (i >= size())
    throw Error(fmt::format("element {} of an array of {}", i, count_));
  if (elements_) return (*elements_)[i];
  GgufValue value;
  value.type_ = element_type_;
  const size_t size = static_cast<size_t>(scalar_size(static_cast<uint32_t>(element_type_)));
  value.bytes_ = bytes_.substr(i * size, size);
  return value;
}

int GgufValue::depth() const {
  if (type_ != GgufType::ARRAY) return 0;
  int deepest = 0;
  if (elements_)
    for (const GgufValue& element : *elements_) deepest = std::max(deepest, element.depth());
  return 1 + deepest;
}

std::vector<int64_t> GgufTensorInfo::shape() const {
  return std::vector<int64_t>(dims.rbegin(), dims.rend());
}

// ---- the file ---------------------------------------------------------------------------------

GgufFile GgufFile::open(const std::string& path) {
  GgufFile file;
  file.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  struct stat status {};
  const bool stat_ok = ::fstat(fd, &status) == 0;
  const int stat_errno = errno;
  if (!stat_ok || !S_ISREG(status.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{}: {}", path, stat_ok ? std::string("not a regular file")
                                                    : "cannot stat (" + std::string(std::strerror(stat_errno)) + ")"));
  }
  file.size_ = static_cast<size_t>(status.st_size);
  if (file.size_ > 0) {
    void* address = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);  // the mapping keeps the file
    if (address == MAP_FAILED)
      throw Error(fmt::format("{}: cannot map ({})", path, std::strerror(map_errno)));
    file.map_ = std::unique_ptr<const uint8_t, Unmap>(static_cast<const uint8_t*>(address),
                                                     Unmap{file.size_});
  } else {
    ::close(fd);
  }
  GgufParser(file).parse();  // on an error, `file` unmaps in its destructor
  return file;
}

void GgufFile::Unmap::operator()(const uint8_t* address) const noexcept {
  ::munmap(const_cast<uint8_t*>(address), size);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) throw Error(fmt::format("{}: no metadata key {}", path_, quoted(key)));
  return *value;
}

void GgufFile::type_error(std::string_view key, const GgufValue& value,
                          std::string_view expected) const {
  std::string actual = gguf_type_name(static_cast<uint32_t>(value.type()));
  if (value.type() == GgufType::ARRAY)
    actual += " of " + gguf_type_name(static_cast<uint32_t>(value.element_type_));
  throw Error(fmt::format("{}: metadata key {} is {}, expected {}", path_, quoted(key), actual,
                          expected));
}

std::string_view GgufFile::get_string(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::STRING) type_error(key, value, "STRING");
  return value.to_string();
}

uint32_t GgufFile::get_uint32(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::UINT32) type_error(key, value, "UINT32");
  return static_cast<uint32_t>(value.to_integer());
}

int64_t GgufFile::get_integer(std::string_view key) const {
  const GgufValue& value = get(key);
  if (!value.is_integer()) type_error(key, value, "an integer");
  try {
    return value.to_integer();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: metadata key {}: {}", path_, quoted(key), e.what()));
  }
}

float GgufFile::get_float32(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::FLOAT32) type_error(key, value, "FLOAT32");
  return value.to_float32();
}

double GgufFile::get_number(std::string_view key) const {
  const GgufValue& value = get(key);
  if (!value.is_integer() && !value.is_float()) type_error(key, value, "a number");
  return value.to_number();
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::BOOL) type_error(key, value, "BOOL");
  return value.to_bool();
}

std::vector<std::string_view> GgufFile::get_strings(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::ARRAY || value.element_type_ != GgufType::STRING)
    type_error(key, value, "ARRAY of STRING");
  std::vector<std::string_view> strings;
  strings.reserve(value.size());
  for (const GgufValue& element : *value.elements_) strings.push_back(element.bytes_);
  return strings;
}

std::vector<int64_t> GgufFile::get_integers(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::ARRAY || !integer_type(value.element_type_))
    type_error(key, value, "ARRAY of an integer type");
  std::vector<int64_t> integers;
  integers.reserve(value.size());
  try {
    for (size_t i = 0; i < value.size(); ++i) integers.push_back(value.element(i).to_integer());
  } catch (const Error& e) {
    throw Error(fmt::format("{}: metadata key {}: {}", path_, quoted(key), e.what()));
  }
  return integers;
}

std::vector<float> GgufFile::get_float32s(std::string_view key) const {
  const GgufValue& value = get(key);
  if (value.type() != GgufType::ARRAY || value.element_type_ != GgufType::FLOAT32)
    type_error(key, value, "ARRAY of FLOAT32");
  std::vector<float> floats(value.size());
  if (!floats.empty()) std::memcpy(floats.data(), value.bytes_.data(), floats.size() * sizeof(float));
  return floats;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  if (const GgufTensorInfo* tensor = find_tensor(name)) return *tensor;
  std::string some;
  for (size_t i = 0; i < tensors_.size() && i < 5; ++i)
    some += (i ? ", " : "") + quoted(tensors_[i].name);
  if (tensors_.size() > 5) some += ", ...";
  throw Error(fmt::format("{}: no tensor {} (the file has {} tensors{}{})", path_, quoted(name),
                          tensors_.size(), tensors_.empty() ? "" : ": ", some));
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& tensor) const {
  return map_.get() + data_offset_ + tensor.offset;
}

void GgufFile::dequantize(const GgufTensorInfo& tensor, float* out) const {
  formats::dequantize(tensor.type, tensor_data(tensor), static_cast<size_t>(tensor.elements), out,
                      fmt::format("tensor {} of {}", quoted(tensor.name), path_));
}

std::vector<float> GgufFile::dequantize(const GgufTensorInfo& tensor) const {
  const GgmlTypeTraits* traits = find_ggml_type(tensor.type);
  std::vector<float> values;
  if (traits != nullptr && traits->dequantize != nullptr)
    values.resize(static_cast<size_t>(tensor.elements));
  dequantize(tensor, values.data());  // an unsupported type throws before writing
  return values;
}

}  // namespace attnkit::formats
