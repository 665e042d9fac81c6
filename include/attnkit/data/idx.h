#pragma once
// IDX files (the MNIST / Fashion-MNIST format, gzip-compressed or plain) and the labelled image
// sets they hold: Debian's dataset-fashion-mnist installs them under
// /usr/share/datasets/fashion-mnist as {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
//
// Layout (big-endian): two zero bytes, a type byte (only 0x08, unsigned byte, is read here), the
// number of dimensions, one uint32 per dimension, then the values row-major. Images are magic
// 0x00000803 with dimensions count × rows × columns; labels 0x00000801 with dimension count.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::data {

struct IdxArray {
  std::vector<uint32_t> shape;
  std::vector<uint8_t> values;  // product of shape
};

// Reads an IDX file of unsigned bytes, decompressing gzip when the file is gzip (else plain).
// Throws attnkit::Error "PATH: ..." (one line) for a file that cannot be read, a gzip stream
// that is truncated or corrupt, a wrong magic (non-zero first bytes, a type other than 0x08, no
// dimensions), or a size that differs from what the header says (truncated or trailing bytes).
IdxArray read_idx_file(const std::string& path);

// Images with their labels.
struct LabelledImages {
  int rows = 0;
  int columns = 0;
  std::vector<uint8_t> pixels;  // count × rows × columns, row-major
  std::vector<uint8_t> labels;  // count
  size_t count() const { return labels.size(); }
};

// Reads an images file (3 dimensions) and a labels file (1 dimension) and checks they match:
// the same count and every label below `classes`. Errors name the file.
LabelledImages read_idx_images(const std::string& images_path, const std::string& labels_path, int classes);

inline constexpr const char* kFashionMnistDirectory = "/usr/share/datasets/fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;

// The files of a Fashion-MNIST split ("train" or "test") in `directory`: FILE-ubyte.gz, or
// FILE-ubyte when only the uncompressed one is there. Error for another split name.
std::string fashion_mnist_path(const std::string& directory, const std::string& split, bool images);

// The split ("train": 60,000 images, "test": 10,000; 28 × 28, labels 0..9). Throws
// attnkit::Error naming the directory (and `apt install dataset-fashion-mnist`) when a file is
// missing, else the errors of read_idx_images.
LabelledImages read_fashion_mnist(const std::string& directory, const std::string& split);

}  // namespace attnkit::data
