// gguf_dump's text and JSON views of a GGUF file (include/attnkit/formats/gguf_dump.h).
#include "attnkit/formats/gguf_dump.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace attnkit::formats {
namespace {

constexpr size_t kShownValues = 6;      // gguf_dump shows an array's first 6 values
constexpr size_t kShownCharacters = 60;  // and cuts longer strings to 57 + "..."

// The type chain gguf-py records for a value: ARRAY, then the chain of the first element (so an
// empty array is just ARRAY).
std::vector<GgufType> type_chain(const GgufValue& value) {
  std::vector<GgufType> chain{value.type()};
  if (value.type() == GgufType::ARRAY && value.size() > 0) {
    const std::vector<GgufType> rest = type_chain(value.element(0));
    chain.insert(chain.end(), rest.begin(), rest.end());
  }
  return chain;
}

std::string type_name(GgufType type) { return gguf_type_name(static_cast<uint32_t>(type)); }

// Non-array values in file order (gguf_dump flattens arrays of arrays), at most `limit`.
void collect_leaves(const GgufValue& value, size_t limit, std::vector<GgufValue>& leaves) {
  if (value.type() != GgufType::ARRAY) {
    if (leaves.size() < limit) leaves.push_back(value);
    return;
  }
  for (size_t i = 0; i < value.size() && leaves.size() < limit; ++i)
    collect_leaves(value.element(i), limit, leaves);
}

uint64_t leaf_count(const GgufValue& value) {
  if (value.type() != GgufType::ARRAY) return 1;
  if (value.element_type() != GgufType::ARRAY) return value.size();
  uint64_t count = 0;
  for (size_t i = 0; i < value.size(); ++i) count += leaf_count(value.element(i));
  return count;
}

// The code points of UTF-8 text; a byte that starts no valid sequence becomes -1 - byte.
std::vector<int32_t> decode_utf8(std::string_view text) {
  std::vector<int32_t> points;
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    int length = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 0;
    int32_t point = length == 1 ? lead : length == 2 ? lead & 0x1F : length == 3 ? lead & 0x0F : lead & 0x07;
    bool valid = length != 0 && i + length <= text.size();
    for (int k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      point = (point << 6) | (next & 0x3F);
    }
    static constexpr int32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
    if (valid && (point < kMinimum[length] || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF)))
      valid = false;
    if (!valid) {
      points.push_back(-1 - lead);
      ++i;
      continue;
    }
    points.push_back(point);
    i += length;
  }
  return points;
}

// Characters Python's str.isprintable() rejects among the common ones: separators other than
// the space, format characters, C1 controls, private use.
bool unprintable(int32_t point) {
  return point < 0x20 || (point >= 0x7F && point <= 0xA0) || point == 0xAD || point == 0x61C ||
         point == 0x1680 || point == 0x180E || (point >= 0x2000 && point <= 0x200F) ||
         (point >= 0x2028 && point <= 0x202F) || (point >= 0x205F && point <= 0x206F) ||
         point == 0x3000 || (point >= 0xE000 && point <= 0xF8FF) || point == 0xFEFF ||
         (point >= 0xFFF9 && point <= 0xFFFB);
}

void append_utf8(std::string& out, int32_t point) {
  if (point < 0x80) {
    out += static_cast<char>(point);
  } else if (point < 0x800) {
    out += static_cast<char>(0xC0 | (point >> 6));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else if (point < 0x10000) {
    out += static_cast<char>(0xE0 | (point >> 12));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (point >> 18));
    out += static_cast<char>(0x80 | ((point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  }
}

// Python's repr() of a str, of the first `cut` characters plus "..." when it has more than
// `limit` (gguf_dump's content[:57] + '...').
std::string python_repr(std::string_view text, size_t limit = SIZE_MAX, size_t cut = SIZE_MAX) {
  std::vector<int32_t> points = decode_utf8(text);
  if (points.size() > limit) {
    points.resize(cut);
    for (int k = 0; k < 3; ++k) points.push_back('.');
  }
  bool single = false, double_quote = false;
  for (int32_t point : points) {
    single |= point == '\'';
    double_quote |= point == '"';
  }
  const char quote = single && !double_quote ? '"' : '\'';
  std::string out(1, quote);
  for (int32_t point : points) {
    if (point < 0) {
      out += fmt::format("\\x{:02x}", -1 - point);
    } else if (point == quote || point == '\\') {
      out += '\\';
      out += static_cast<char>(point);
    } else if (point == '\t') {
      out += "\\t";
    } else if (point == '\n') {
      out += "\\n";
    } else if (point == '\r') {
      out += "\\r";
    } else if (unprintable(point)) {
      out += point <= 0xFF ? fmt::format("\\x{:02x}", point)
             : point <= 0xFFFF ? fmt::format("\\u{:04x}", point) : fmt::format("\\U{:08x}", point);
    } else {
      append_utf8(out, point);
    }
  }
  return out + quote;
}

// Python's repr() of a float (the shortest digits that read back, ".0" for whole numbers).
std::string python_float(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  return text;
}

std::string python_scalar(const GgufValue& value) {
  switch (value.type()) {
    case GgufType::BOOL: return value.to_bool() ? "True" : "False";
    case GgufType::FLOAT32: case GgufType::FLOAT64: return python_float(value.to_number());
    case GgufType::UINT64: return fmt::format("{}", value.to_unsigned());
    case GgufType::STRING: return python_repr(value.to_string());
    default: return fmt::format("{}", value.to_integer());
  }
}

std::string text_value(const GgufValue& value) {
  if (value.type() == GgufType::STRING)
    return python_repr(value.to_string(), kShownCharacters, kShownCharacters - 3);
  if (value.type() != GgufType::ARRAY) return python_scalar(value);
  std::vector<GgufValue> leaves;
  collect_leaves(value, kShownValues, leaves);
  std::string out = "[";
  for (size_t i = 0; i < leaves.size(); ++i) out += (i ? ", " : "") + python_scalar(leaves[i]);
  return out + (leaf_count(value) > kShownValues ? ", ...]" : "]");
}

std::string pretty_type(const GgufValue& value) {
  const std::vector<GgufType> chain = type_chain(value);
  const size_t nest = chain.size() - 1;
  return std::string(nest, '[') + type_name(chain.back()) + std::string(nest, ']');
}

nlohmann::json json_value(const GgufValue& value) {
  switch (value.type()) {
    case GgufType::BOOL: return value.to_bool();
    case GgufType::FLOAT32: case GgufType::FLOAT64: return value.to_number();
    case GgufType::UINT64: return value.to_unsigned();
    case GgufType::STRING: return std::string(value.to_string());
    case GgufType::ARRAY: {
      nlohmann::json array = nlohmann::json::array();
      for (size_t i = 0; i < value.size(); ++i) array.push_back(json_value(value.element(i)));
      return array;
    }
    default: return value.to_integer();
  }
}

}  // namespace

std::string gguf_dump_text(const GgufFile& file) {
  std::string out = fmt::format(
      "* GGUF version {}, LITTLE endian, alignment {}, data section at byte {} ({} bytes)\n",
      file.version(), file.alignment(), file.data_offset(),
      file.file_size() > file.data_offset() ? file.file_size() - file.data_offset() : 0);
  out += fmt::format("* Dumping {} key/value pair(s)\n", file.metadata().size() + 3);
  size_t n = 0;
  const auto line = [&](std::string_view type, uint64_t count, std::string_view key,
                        const std::string& value) {
    out += fmt::format("  {:5}: {:10} | {:8} | {} = {}\n", ++n, type, count, key, value);
  };
  line("UINT32", 1, "GGUF.version", fmt::format("{}", file.version()));
  line("UINT64", 1, "GGUF.tensor_count", fmt::format("{}", file.tensors().size()));
  line("UINT64", 1, "GGUF.kv_count", fmt::format("{}", file.metadata().size()));
  for (const GgufMetadataEntry& entry : file.metadata())
    line(pretty_type(entry.value), leaf_count(entry.value), entry.key, text_value(entry.value));
  out += fmt::format("* Dumping {} tensor(s)\n", file.tensors().size());
  n = 0;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    std::string dims;
    for (size_t d = 0; d < kGgufMaxDims; ++d)
      dims += fmt::format("{}{:5}", d ? ", " : "", d < tensor.dims.size() ? tensor.dims[d] : 1);
    out += fmt::format("  {:5}: {:10} | {} | {:7} | {:10} | {}\n", ++n, tensor.elements, dims,
                       ggml_type_name(tensor.type), tensor.bytes, tensor.name);
  }
  return out;
}

std::string gguf_dump_json(const GgufFile& file) {
  nlohmann::json metadata = nlohmann::json::object();
  const auto header = [&](const char* key, size_t index, uint64_t offset, const char* type,
                          uint64_t value) {
    metadata[key] = {{"index", index}, {"type", type}, {"offset", offset}, {"value", value}};
  };
  header("GGUF.version", 0, 4, "UINT32", file.version());
  header("GGUF.tensor_count", 1, 8, "UINT64", file.tensors().size());
  header("GGUF.kv_count", 2, 16, "UINT64", file.metadata().size());
  size_t index = 3;
  for (const GgufMetadataEntry& entry : file.metadata()) {
    nlohmann::json item = {{"index", index++},
                           {"type", type_name(entry.value.type())},
                           {"offset", entry.record_offset},
                           {"value", json_value(entry.value)}};
    if (entry.value.type() == GgufType::ARRAY) {
      nlohmann::json types = nlohmann::json::array();
      const std::vector<GgufType> chain = type_chain(entry.value);
      for (size_t i = 1; i < chain.size(); ++i) types.push_back(type_name(chain[i]));
      item["array_types"] = types;
      item["element_type"] = type_name(entry.value.element_type());
    }
    metadata[entry.key] = item;
  }
  nlohmann::json tensors = nlohmann::json::object();
  index = 0;
  for (const GgufTensorInfo& tensor : file.tensors())
    tensors[tensor.name] = {{"index", index++},
                            {"shape", tensor.dims},
                            {"type", ggml_type_name(tensor.type)},
                            {"offset", tensor.record_offset},
                            {"elements", tensor.elements},
                            {"bytes", tensor.bytes},
                            {"data_offset", file.data_offset() + tensor.offset}};
  const nlohmann::json result = {{"filename", file.path()},
                                 {"endian", "LITTLE"},
                                 {"version", file.version()},
                                 {"alignment", file.alignment()},
                                 {"data_offset", file.data_offset()},
                                 {"metadata", metadata},
                                 {"tensors", tensors}};
  return result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace attnkit::formats
