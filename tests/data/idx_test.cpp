// IDX reader (Fashion-MNIST): small files written here, plain and gzip (support/idx_files.h's
// stored-block gzip writer, so the reader meets real gzip framing), truncated and corrupt copies, and
// Debian's installed dataset when it is there.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/data/idx.h"
#include "support/idx_files.h"
#include "support/test_files.h"

namespace attnkit::data {
namespace {

namespace fs = std::filesystem;
using attnkit::testing::error_of;
using attnkit::testing::write_bytes;

using attnkit::testing::gzip_stored;
using attnkit::testing::idx_bytes;

// `count` images of rows×columns (pixel = 3·i + position) and labels i % classes.
struct SmallSet {
  std::string images, labels;
};
SmallSet small_set(uint32_t count, uint32_t rows, uint32_t columns, int classes) {
  std::vector<uint8_t> pixels, labels;
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t p = 0; p < rows * columns; ++p) pixels.push_back(static_cast<uint8_t>(3 * i + p));
    labels.push_back(static_cast<uint8_t>(i % classes));
  }
  return {idx_bytes(0x803, {count, rows, columns}, pixels), idx_bytes(0x801, {count}, labels)};
}

TEST(Idx, ReadsPlainAndGzipFiles) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  const auto set = small_set(7, 4, 5, 10);
  const auto plain = write_bytes(dir / "images-plain", set.images);
  const auto gz = write_bytes(dir / "images.gz", gzip_stored(set.images));
  for (const auto& path : {plain, gz}) {
    const IdxArray a = read_idx_file(path);
    EXPECT_EQ(a.shape, (std::vector<uint32_t>{7, 4, 5})) << path;
    ASSERT_EQ(a.values.size(), 140u);
    EXPECT_EQ(a.values[0], 0);
    EXPECT_EQ(a.values[20 * 2 + 3], 6 + 3);  // image 2, position 3
  }
  // A file larger than one stored block.
  const auto big = small_set(3000, 5, 5, 10);
  const auto big_gz = write_bytes(dir / "big.gz", gzip_stored(big.images));
  EXPECT_EQ(read_idx_file(big_gz).values.size(), 75000u);

  const auto labels = write_bytes(dir / "labels.gz", gzip_stored(set.labels));
  const auto both = read_idx_images(gz, labels, 10);
  EXPECT_EQ(both.rows, 4);
  EXPECT_EQ(both.columns, 5);
  EXPECT_EQ(both.count(), 7u);
  EXPECT_EQ(both.labels[6], 6);
}

TEST(Idx, BadFilesAreOneLineErrorsNamingTheFile) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  const auto set = small_set(7, 4, 5, 10);
  const std::string gz = gzip_stored(set.images);
  auto expect_error = [&](const std::string& name, const std::string& content, const std::string& expected) {
    const auto path = write_bytes(dir / name, content);
    const auto error = error_of([&] { read_idx_file(path); });
    EXPECT_NE(error.find(path + ": "), std::string::npos) << error;
    EXPECT_NE(error.find(expected), std::string::npos) << name << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  };
  expect_error("truncated.gz", gz.substr(0, gz.size() - 30), "truncated gzip data");
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0x5A;
  expect_error("crc.gz", bad_crc, "corrupt gzip data");
  expect_error("short-plain", set.images.substr(0, set.images.size() - 1), "data bytes, but the IDX header's shape needs 140 (truncated)");
  expect_error("long-plain", set.images + "xx", "(trailing bytes)");
  expect_error("magic", "\x01\x02\x08\x03" + set.images.substr(4), "not an IDX file of unsigned bytes (magic 01020803");
  expect_error("type", std::string("\0\0\x0d\x03", 4) + set.images.substr(4), "magic 00000d03");
  expect_error("empty", "", "magic missing");
  expect_error("header", std::string("\0\0\x08\x03\0\0", 6), "truncated IDX header");
  EXPECT_NE(error_of([&] { read_idx_file((dir / "absent.gz").string()); }).find("absent.gz"), std::string::npos);

  // Images and labels that do not match.
  const auto images = write_bytes(dir / "i", set.images);
  const auto few = write_bytes(dir / "l-few", small_set(6, 4, 5, 10).labels);
  auto error = error_of([&] { read_idx_images(images, few, 10); });
  EXPECT_NE(error.find("6 labels for the 7 images"), std::string::npos) << error;
  const auto labels = write_bytes(dir / "l", set.labels);
  error = error_of([&] { read_idx_images(images, labels, 5); });
  EXPECT_NE(error.find("label 5 of example 5 is not a class in 0..4"), std::string::npos) << error;
  error = error_of([&] { read_idx_images(labels, labels, 10); });
  EXPECT_NE(error.find("an images file has 3 dimensions"), std::string::npos) << error;
  error = error_of([&] { read_idx_images(images, images, 10); });
  EXPECT_NE(error.find("a labels file has 1 dimension"), std::string::npos) << error;
}

TEST(Idx, FashionMnistFileNamesAndMissingFiles) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  const auto set = small_set(12, 28, 28, 10);
  write_bytes(dir / "train-images-idx3-ubyte.gz", gzip_stored(set.images));
  write_bytes(dir / "train-labels-idx1-ubyte", set.labels);  // uncompressed is found too
  const auto train = read_fashion_mnist(dir.string(), "train");
  EXPECT_EQ(train.count(), 12u);
  EXPECT_EQ(train.rows, 28);
  const auto error = error_of([&] { read_fashion_mnist(dir.string(), "test"); });
  EXPECT_NE(error.find("t10k-images-idx3-ubyte.gz: no Fashion-MNIST file"), std::string::npos) << error;
  EXPECT_NE(error_of([&] { read_fashion_mnist(dir.string(), "val"); }).find("'val' is not train or test"),
            std::string::npos);
}

TEST(Idx, InstalledFashionMnist) {
  if (!fs::exists(fs::path(kFashionMnistDirectory) / "t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (const auto& [split, count] : {std::pair<std::string, size_t>{"train", 60000}, {"test", 10000}}) {
    const auto set = read_fashion_mnist(kFashionMnistDirectory, split);
    EXPECT_EQ(set.count(), count) << split;
    EXPECT_EQ(set.rows, 28);
    EXPECT_EQ(set.columns, 28);
    std::vector<size_t> per_class(10, 0);
    for (uint8_t l : set.labels) ++per_class.at(l);
    for (size_t c : per_class) EXPECT_EQ(c, count / 10) << split;  // Fashion-MNIST is balanced
    EXPECT_EQ(*std::max_element(set.pixels.begin(), set.pixels.end()), 255);
  }
}

}  // namespace
}  // namespace attnkit::data
