// LRA Pathfinder generator: the label is the markers' true connectivity (a flood fill written
// here, independent of the library's), contours stay apart and inside the image, labels balance,
// the seed decides everything, bad settings are one-line errors, the split files round-trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/data/pathfinder.h"
#include "support/test_files.h"

namespace attnkit::data {
namespace {

namespace fs = std::filesystem;
using attnkit::testing::error_of;
using attnkit::testing::read_bytes;
using attnkit::testing::write_bytes;

// Component number of every pixel >= threshold (8-connectivity), -1 elsewhere; `count` is set to
// the number of components.
std::vector<int> components(const PathfinderImage& image, int threshold, int& count) {
  const int n = image.size;
  std::vector<int> label(image.pixels.size(), -1);
  count = 0;
  for (int start = 0; start < n * n; ++start) {
    if (label[start] >= 0 || image.pixels[start] < threshold) continue;
    std::vector<int> queue{start};
    label[start] = count;
    for (size_t head = 0; head < queue.size(); ++head) {
      const int x = queue[head] % n, y = queue[head] / n;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          const int nx = x + dx, ny = y + dy;
          if (nx < 0 || ny < 0 || nx >= n || ny >= n) continue;
          const int i = ny * n + nx;
          if (label[i] < 0 && image.pixels[i] >= threshold) {
            label[i] = count;
            queue.push_back(i);
          }
        }
    }
    ++count;
  }
  return label;
}

// Checks one image: markers lit, label == connectivity, one component per contour, a clean border.
void check_image(const PathfinderImage& image, const PathfinderOptions& o, size_t index) {
  SCOPED_TRACE("image " + std::to_string(index));
  ASSERT_EQ(image.size, o.size);
  ASSERT_EQ(image.pixels.size(), static_cast<size_t>(o.size * o.size));
  for (uint8_t v : image.pixels) ASSERT_TRUE(v == 0 || v == o.intensity) << int(v);
  int count = 0;
  const auto label = components(image, 1, count);
  EXPECT_EQ(count, 2 + o.distractors) << "contours touch or one is broken";
  const int a = label[image.marker_y[0] * o.size + image.marker_x[0]];
  const int b = label[image.marker_y[1] * o.size + image.marker_x[1]];
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_EQ(image.label, a == b ? 1 : 0);
  EXPECT_EQ(pathfinder_markers_connected(image, 1), a == b);
  EXPECT_EQ(pathfinder_markers_connected(image, o.intensity), a == b);
  for (int y = 0; y < o.size; ++y)
    for (int x = 0; x < o.size; ++x) {
      const bool border = x < o.margin || y < o.margin || x >= o.size - o.margin || y >= o.size - o.margin;
      if (border) ASSERT_EQ(image.pixels[y * o.size + x], 0) << "lit border pixel " << x << "," << y;
    }
}

TEST(Pathfinder, LabelIsTheMarkersTrueConnectivityAt32) {
  const auto o = pathfinder_options(32);
  EXPECT_EQ(o.paddles, 14);
  EXPECT_EQ(o.distractors, 5);
  EXPECT_EQ(o.distractor_paddles, 4);
  EXPECT_DOUBLE_EQ(o.paddle_length, 2.0);
  const auto images = generate_pathfinder(o, 7, 600);
  int positives = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    check_image(images[i], o, i);
    positives += images[i].label;
    if (HasFailure()) return;
  }
  EXPECT_EQ(positives, 300);
}

TEST(Pathfinder, LabelIsTheMarkersTrueConnectivityAt128) {
  const auto o = pathfinder_options(128);
  EXPECT_DOUBLE_EQ(o.paddle_length, 8.0);
  EXPECT_DOUBLE_EQ(o.marker_radius, 6.0);
  const auto images = generate_pathfinder(o, 3, 40);
  for (size_t i = 0; i < images.size(); ++i) {
    check_image(images[i], o, i);
    if (HasFailure()) return;
  }
}

TEST(Pathfinder, TargetContoursAreLongerThanDistractors) {
  const auto o = pathfinder_options(32);
  for (const auto& image : generate_pathfinder(o, 11, 50)) {
    int count = 0;
    const auto label = components(image, 1, count);
    std::vector<int> sizes(count, 0);
    for (int l : label)
      if (l >= 0) ++sizes[l];
    const int a = label[image.marker_y[0] * o.size + image.marker_x[0]];
    // A target contour has at least one pixel per paddle plus its start.
    EXPECT_GE(sizes[a], o.paddles + 1);
    // Pixels of the lit image: targets + distractors, each at least (paddles + 1) pixels.
    int lit = 0;
    for (uint8_t v : image.pixels) lit += v > 0;
    EXPECT_GE(lit, 2 * (o.paddles + 1) + o.distractors * (o.distractor_paddles + 1));
  }
}

TEST(Pathfinder, EasySettingsWithoutDistractorsStayCorrect) {
  PathfinderOptions o;
  o.size = 16;
  o.paddles = 4;
  o.distractors = 0;
  const auto images = generate_pathfinder(o, 5, 300);
  for (size_t i = 0; i < images.size(); ++i) {
    check_image(images[i], o, i);
    if (HasFailure()) return;
  }
}

TEST(Pathfinder, DeterministicBySeed) {
  const auto o = pathfinder_options(32);
  const auto a = generate_pathfinder(o, 42, 20), b = generate_pathfinder(o, 42, 20), c = generate_pathfinder(o, 43, 20);
  int same_as_other_seed = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].pixels, b[i].pixels);
    EXPECT_EQ(a[i].label, b[i].label);
    same_as_other_seed += a[i].pixels == c[i].pixels;
  }
  EXPECT_EQ(same_as_other_seed, 0);
  // Images differ from one another within a stream too.
  std::set<std::vector<uint8_t>> distinct;
  for (const auto& image : a) distinct.insert(image.pixels);
  EXPECT_EQ(distinct.size(), a.size());
}

TEST(Pathfinder, LabelsComeInBalancedPairs) {
  PathfinderGenerator generator(pathfinder_options(32), 9);
  int first_positive = 0;
  for (int pair = 0; pair < 100; ++pair) {
    const int a = generator.next().label, b = generator.next().label;
    EXPECT_EQ(a + b, 1) << "pair " << pair;
    first_positive += a;
  }
  // The order inside a pair is random: neither label always comes first.
  EXPECT_GT(first_positive, 25);
  EXPECT_LT(first_positive, 75);
}

TEST(Pathfinder, BadSettingsAreOneLineErrors) {
  auto error_for = [](auto change) {
    PathfinderOptions o;
    change(o);
    return error_of([&] { check_pathfinder_options(o); });
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {error_for([](PathfinderOptions& o) { o.size = 4; }), "size must be in 8..1024, got 4"},
      {error_for([](PathfinderOptions& o) { o.paddles = 0; }), "paddles must be >= 1, got 0"},
      {error_for([](PathfinderOptions& o) { o.distractors = -1; }), "distractors must be >= 0"},
      {error_for([](PathfinderOptions& o) { o.distractor_paddles = 0; }), "distractor_paddles must be >= 1"},
      {error_for([](PathfinderOptions& o) { o.paddle_length = 0.5; }), "paddle_length must be in 1..size"},
      {error_for([](PathfinderOptions& o) { o.max_turn_degrees = 120; }), "max_turn_degrees must be in 0..90"},
      {error_for([](PathfinderOptions& o) { o.marker_radius = -1; }), "marker_radius must be >= 0"},
      {error_for([](PathfinderOptions& o) { o.margin = -1; }), "margin must be >= 0"},
      {error_for([](PathfinderOptions& o) { o.clearance = 0; }), "clearance must be >= 1"},
      {error_for([](PathfinderOptions& o) { o.intensity = 0; }), "intensity must be >= 1"},
      {error_for([](PathfinderOptions& o) { o.paddles = 40; }), "do not fit a 32x32 image"},
  };
  for (const auto& [error, expected] : cases) {
    EXPECT_NE(error.find("Pathfinder options: "), std::string::npos) << error;
    EXPECT_NE(error.find(expected), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  EXPECT_NE(error_of([] { pathfinder_options(2000); }).find("size must be in 8..1024"), std::string::npos);
  EXPECT_NE(error_of([] {
              PathfinderOptions o;
              o.size = 3;
              PathfinderGenerator generator(o, 1);
            }).find("size must be in 8..1024, got 3"),
            std::string::npos);
  // Settings that pass the check but leave no room: the generator gives up in one line.
  PathfinderOptions crowded;
  crowded.size = 12;
  crowded.paddles = 6;
  crowded.distractors = 30;
  ASSERT_EQ(error_of([&] { check_pathfinder_options(crowded); }), "");
  const auto error = error_of([&] { PathfinderGenerator(crowded, 1).next(); });
  EXPECT_NE(error.find("could not place every contour"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(Pathfinder, SplitFilesRoundTripAndRejectDamage) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  PathfinderSplitOptions options;
  options.generator = pathfinder_options(32);
  options.train_count = 10;
  options.validation_count = 4;
  options.test_count = 6;
  options.seed = 3;
  const auto files = write_pathfinder_splits(options, (dir / "pf").string());
  EXPECT_EQ(fs::path(files.train).filename(), "pathfinder32_train.bin");
  EXPECT_EQ(fs::path(files.validation).filename(), "pathfinder32_val.bin");
  EXPECT_EQ(fs::path(files.test).filename(), "pathfinder32_test.bin");
  const auto train = read_pathfinder_file(files.train);
  EXPECT_EQ(train.size, 32);
  ASSERT_EQ(train.count(), 10u);
  EXPECT_EQ(read_pathfinder_file(files.validation).count(), 4u);
  EXPECT_EQ(read_pathfinder_file(files.test).count(), 6u);
  EXPECT_EQ(fs::file_size(files.train), 20u + 10u * 1025u);
  // The training split is the stream of seed·4 + 1.
  const auto expected = generate_pathfinder(options.generator, 3 * 4 + 1, 10);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(train.labels[i], expected[i].label);
    EXPECT_TRUE(std::equal(expected[i].pixels.begin(), expected[i].pixels.end(), train.pixels.begin() + i * 1024));
  }
  // The splits are different streams.
  EXPECT_NE(read_pathfinder_file(files.test).pixels, std::vector<uint8_t>(train.pixels.begin(), train.pixels.begin() + 6 * 1024));

  const std::string bytes = read_bytes(files.train);
  const auto truncated = write_bytes(dir / "truncated.bin", bytes.substr(0, bytes.size() - 100));
  auto error = error_of([&] { read_pathfinder_file(truncated); });
  EXPECT_NE(error.find("truncated.bin: "), std::string::npos) << error;
  EXPECT_NE(error.find("truncated or corrupt"), std::string::npos) << error;
  const auto magic = write_bytes(dir / "magic.bin", "XPATHF01" + bytes.substr(8));
  EXPECT_NE(error_of([&] { read_pathfinder_file(magic); }).find("not a Pathfinder file"), std::string::npos);
  std::string bad_label = bytes;
  bad_label[20 + 1025 * 2] = 7;
  const auto labelled = write_bytes(dir / "label.bin", bad_label);
  error = error_of([&] { read_pathfinder_file(labelled); });
  EXPECT_NE(error.find("image 2 has label 7, not 0 or 1"), std::string::npos) << error;
  EXPECT_NE(error_of([&] { read_pathfinder_file((dir / "absent.bin").string()); }).find("absent.bin"), std::string::npos);

  // Bad options are refused before any file is written.
  options.generator.paddles = 0;
  EXPECT_NE(error_of([&] { write_pathfinder_splits(options, (dir / "never").string()); }), "");
  EXPECT_FALSE(fs::exists(dir / "never"));
}

TEST(Pathfinder, SampleSheets) {
  const auto dir = attnkit::testing::scratch_directory("train_test_scratch");
  const auto images = generate_pathfinder(pathfinder_options(32), 1, 6);
  write_pathfinder_sheet(images, (dir / "s.svg").string(), 4);
  const auto svg = read_bytes(dir / "s.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t captions = 0;
  for (size_t at = 0; (at = svg.find("connected</text>", at)) != std::string::npos; ++at) ++captions;
  EXPECT_EQ(captions, 6u);
  write_pathfinder_sheet(images, (dir / "s.pgm").string(), 3);
  const auto pgm = read_bytes(dir / "s.pgm");
  // 3 columns x 2 rows of 32 pixels with 2-pixel gaps: 104 x 70.
  const std::string head = "P5\n104 70\n255\n";
  ASSERT_EQ(pgm.substr(0, head.size()), head);
  EXPECT_EQ(pgm.size(), head.size() + 104u * 70u);
  EXPECT_NE(error_of([&] { write_pathfinder_sheet(images, (dir / "s.png").string()); }).find("must be .svg or .pgm"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_pathfinder_sheet({}, (dir / "e.svg").string()); }).find("no images"),
            std::string::npos);
}

}  // namespace
}  // namespace attnkit::data
