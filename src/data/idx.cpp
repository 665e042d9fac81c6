#include "attnkit/data/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "attnkit/error.h"
#include "attnkit/file.h"

namespace attnkit::data {
namespace {

// The decompressed bytes of a gzip file (or the bytes of a plain one: zlib reads those through).
std::string read_maybe_gzip(const std::string& path) {
  // read_file first: its error names a missing or unreadable file in the project's words.
  const std::string raw = read_file(path, "IDX file");
  const bool gzip = raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f &&
                    static_cast<unsigned char>(raw[1]) == 0x8b;
  if (!gzip) return raw;
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) throw Error(fmt::format("{}: zlib cannot start", path));
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  stream.avail_in = static_cast<uInt>(raw.size());
  std::string out;
  char buffer[1 << 16];
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    status = inflate(&stream, Z_NO_FLUSH);
    if (status == Z_NEED_DICT || status == Z_DATA_ERROR || status == Z_MEM_ERROR)
      throw Error(fmt::format("{}: corrupt gzip data ({})", path, stream.msg ? stream.msg : "inflate failed"));
    out.append(buffer, sizeof buffer - stream.avail_out);
    if (status == Z_BUF_ERROR || (status == Z_OK && stream.avail_in == 0 && stream.avail_out != 0))
      throw Error(fmt::format("{}: truncated gzip data (the stream ends after {} bytes of output)", path, out.size()));
  }
  return out;
}

uint32_t big_endian(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

}  // namespace

IdxArray read_idx_file(const std::string& path) {
  const std::string bytes = read_maybe_gzip(path);
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 || static_cast<unsigned char>(bytes[2]) != 0x08 ||
      bytes[3] == 0) {
    std::string seen;
    for (size_t i = 0; i < std::min<size_t>(4, bytes.size()); ++i)
      seen += fmt::format("{:02x}", static_cast<unsigned char>(bytes[i]));
    throw Error(fmt::format("{}: not an IDX file of unsigned bytes (magic {}, expected 000008 and a dimension count)",
                            path, seen.empty() ? "missing" : seen));
  }
  const size_t dims = static_cast<unsigned char>(bytes[3]);
  const size_t header = 4 + 4 * dims;
  if (bytes.size() < header)
    throw Error(fmt::format("{}: truncated IDX header ({} bytes, {} dimensions need {})", path, bytes.size(), dims, header));
  IdxArray array;
  uint64_t total = 1;
  for (size_t d = 0; d < dims; ++d) {
    array.shape.push_back(big_endian(bytes, 4 + 4 * d));
    total *= array.shape.back();
    if (total > (uint64_t{1} << 40)) throw Error(fmt::format("{}: IDX dimensions too large", path));
  }
  if (bytes.size() - header != total)
    throw Error(fmt::format("{}: {} data bytes, but the IDX header's shape needs {} ({})", path,
                            bytes.size() - header, total, bytes.size() - header < total ? "truncated" : "trailing bytes"));
  array.values.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return array;
}

LabelledImages read_idx_images(const std::string& images_path, const std::string& labels_path, int classes) {
  IdxArray images = read_idx_file(images_path);
  if (images.shape.size() != 3)
    throw Error(fmt::format("{}: an images file has 3 dimensions (count, rows, columns), this one {}", images_path,
                            images.shape.size()));
  if (images.shape[1] == 0 || images.shape[2] == 0 || images.shape[1] > 4096 || images.shape[2] > 4096)
    throw Error(fmt::format("{}: image size {}x{} is not in 1..4096", images_path, images.shape[1], images.shape[2]));
  IdxArray labels = read_idx_file(labels_path);
  if (labels.shape.size() != 1)
    throw Error(fmt::format("{}: a labels file has 1 dimension, this one {}", labels_path, labels.shape.size()));
  if (labels.shape[0] != images.shape[0])
    throw Error(fmt::format("{}: {} labels for the {} images of {}", labels_path, labels.shape[0], images.shape[0],
                            images_path));
  for (size_t i = 0; i < labels.values.size(); ++i)
    if (labels.values[i] >= classes)
      throw Error(fmt::format("{}: label {} of example {} is not a class in 0..{}", labels_path, labels.values[i], i,
                              classes - 1));
  LabelledImages out;
  out.rows = static_cast<int>(images.shape[1]);
  out.columns = static_cast<int>(images.shape[2]);
  out.pixels = std::move(images.values);
  out.labels = std::move(labels.values);
  return out;
}

std::string fashion_mnist_path(const std::string& directory, const std::string& split, bool images) {
  if (split != "train" && split != "test")
    throw Error(fmt::format("Fashion-MNIST split '{}' is not train or test", split));
  const std::string stem = fmt::format("{}-{}-ubyte", split == "train" ? "train" : "t10k",
                                       images ? "images-idx3" : "labels-idx1");
  const auto dir = std::filesystem::path(directory);
  if (!std::filesystem::exists(dir / (stem + ".gz")) && std::filesystem::exists(dir / stem)) return (dir / stem).string();
  return (dir / (stem + ".gz")).string();
}

LabelledImages read_fashion_mnist(const std::string& directory, const std::string& split) {
  const std::string images = fashion_mnist_path(directory, split, true);
  const std::string labels = fashion_mnist_path(directory, split, false);
  for (const auto& file : {images, labels})
    if (!std::filesystem::exists(file))
      throw Error(fmt::format("{}: no Fashion-MNIST file (install Debian's dataset-fashion-mnist: files in {})", file,
                              kFashionMnistDirectory));
  return read_idx_images(images, labels, kFashionMnistClasses);
}

}  // namespace attnkit::data
