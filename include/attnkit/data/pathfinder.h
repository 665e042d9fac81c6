#pragma once
// Pathfinder, the Long-Range Arena's image task (Tay et al. 2021, after Linsley et al. 2018,
// "Learning long-range spatial dependencies with horizontal gated recurrent units"): an image
// shows several curved contours made of short straight paddles and two circle markers. The label
// is 1 when both markers sit on the ends of the same contour, 0 when they sit on two different
// contours. Our own generator of that idea (no code of the original), with LRA's 32×32 "hard"
// settings as defaults and Pathfinder-X (128×128) as scaled settings.
//
// Drawing. A contour is a chain of `paddles` straight segments of `paddle_length` pixels: it
// starts at a random point with a random direction, and each next paddle turns by an angle drawn
// uniformly from [-max_turn_degrees, +max_turn_degrees] (the continuity constraint). Segment end
// points are rounded to pixels and joined by Bresenham lines, 1 pixel wide, so a contour is one
// 8-connected chain of pixels. Unlike the original (paddles separated by a small gap, antialiased),
// paddles meet end to end: connectivity in the pixels is then the label's truth, which a flood fill
// can check. Markers are filled discs of `marker_radius` centred on contour ends.
//
// Crossings. The original keeps contours apart; so do we, strictly: a pixel of one contour (or of
// its markers) is never within `clearance` pixels (Chebyshev distance) of a pixel of another, and
// a contour does not come back within `clearance` of its own pixels older than two paddles. A
// paddle that would break this is drawn again with another turn (up to 20 times), a contour that
// cannot grow is started again elsewhere, and an image that cannot be completed is started again.
// Every pixel drawn lies at least `margin` pixels inside the image. So two markers are joined by
// lit pixels (8-connectivity, any threshold below `intensity`) exactly when the label is 1.
//
// Each image has two target contours of `paddles` paddles and `distractors` contours of
// `distractor_paddles` paddles. Positive: both markers on the two ends of the first target
// contour. Negative: one marker on an end of each target contour. So both classes have the same
// contours and the same number of markers. Labels come in pairs (one of each, in random order), so
// every even count is exactly balanced.
//
// Pixels are uint8, row-major, 0 = background, contours and markers `intensity`. The random stream
// is std::mt19937_64 with our own uniform draws, so a seed gives the same images (across platforms
// too, unless their libm rounds a cosine differently at a pixel boundary).
//
// Files (`attnkit data lra-pathfinder`): one per split, pathfinder{size}_{train,val,test}.bin:
//   bytes 0..7   "APATHF01"
//   bytes 8..19  width, height, count: uint32 little-endian
//   then `count` records of 1 label byte (0 or 1) + width·height pixel bytes.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace attnkit::data {

// The defaults are the 32×32 hard settings; pathfinder_options(128) scales them for Pathfinder-X.
struct PathfinderOptions {
  int size = 32;                 // width = height, pixels (8..1024)
  int paddles = 14;              // paddles of each of the two target contours
  int distractors = 5;           // distractor contours
  int distractor_paddles = 4;    // paddles of each distractor
  double paddle_length = 2.0;    // pixels
  double max_turn_degrees = 30;  // continuity: largest turn between successive paddles (0..90)
  double marker_radius = 1.5;    // pixels (a disc of the pixels within it)
  int margin = 1;                // empty border, pixels
  int clearance = 1;             // empty pixels kept between different contours (>= 1)
  uint8_t intensity = 255;       // value of contour and marker pixels (>= 1)
};

// The hard settings for a `size`-pixel image: 32 gives the defaults; other sizes scale the
// lengths (paddle length, marker radius, margin, clearance) by size / 32 and keep the counts.
// Throws attnkit::Error for a size outside 8..1024.
PathfinderOptions pathfinder_options(int size);

// Throws attnkit::Error, one line naming the setting, for options that cannot work: size outside
// 8..1024, paddles < 1, distractors < 0, distractor_paddles < 1 when there are distractors,
// paddle_length < 1, max_turn_degrees outside 0..90, marker_radius < 0, margin < 0, clearance < 1,
// intensity 0, or target contours too long for the image (paddles·paddle_length more than
// 2·(size - 2·margin - 2·marker_radius) pixels).
void check_pathfinder_options(const PathfinderOptions& options);

struct PathfinderImage {
  int size = 0;
  int label = 0;                // 1: the markers are on one contour
  std::vector<uint8_t> pixels;  // size·size, row-major
  int marker_x[2] = {0, 0};     // marker centres (pixels)
  int marker_y[2] = {0, 0};
};

class PathfinderGenerator {
 public:
  PathfinderGenerator(const PathfinderOptions& options, uint64_t seed);  // checks the options

  // The next image. Throws attnkit::Error when 10,000 attempts in a row fail to place every
  // contour (settings too crowded for the image).
  PathfinderImage next();
  const PathfinderOptions& options() const { return options_; }

 private:
  PathfinderOptions options_;
  std::mt19937_64 rng_;
  int pending_label_ = -1;  // the second label of the current pair
};

std::vector<PathfinderImage> generate_pathfinder(const PathfinderOptions& options, uint64_t seed, size_t count);

// Whether the two markers are joined by pixels >= threshold (8-connectivity, flood fill from the
// first marker's centre). Threshold >= 1. The reference check of the label.
bool pathfinder_markers_connected(const PathfinderImage& image, uint8_t threshold = 1);

// A split in memory: count images of size×size, labels[i] and pixels[i·size·size ...].
struct PathfinderSet {
  int size = 0;
  std::vector<uint8_t> labels;
  std::vector<uint8_t> pixels;
  size_t count() const { return labels.size(); }
};

// Writes / reads the file layout above. The writer replaces the file atomically. The reader throws
// attnkit::Error "PATH: ..." for a wrong magic, a non-square or zero size, a file shorter or longer
// than its header says, or a label that is not 0 or 1.
void write_pathfinder_file(const PathfinderSet& set, const std::string& path);
PathfinderSet read_pathfinder_file(const std::string& path);

struct PathfinderSplitOptions {
  PathfinderOptions generator;
  size_t train_count = 20000;
  size_t validation_count = 2000;
  size_t test_count = 2000;
  uint64_t seed = 0;  // split k uses seed·4 + k + 1 (k = 0 train, 1 val, 2 test)
};

struct PathfinderSplitFiles {
  std::string train;
  std::string validation;
  std::string test;
};

// The file name of a split ("train", "val", "test") for images of `size` pixels.
std::string pathfinder_file_name(int size, const std::string& split);

// Generates the three splits and writes DIRECTORY/pathfinder{size}_{train,val,test}.bin, creating
// DIRECTORY when needed. Options are checked before anything is written.
PathfinderSplitFiles write_pathfinder_splits(const PathfinderSplitOptions& options, const std::string& directory);

// A sheet of sample images: `columns` per row, each with its label. ".svg": one rect per run of
// lit pixels on a black square, a caption "connected" / "not connected" under each; ".pgm": a binary
// 8-bit PGM grid with a 2-pixel grey gap. Throws attnkit::Error for another extension, no
// images, images of different sizes or a file that cannot be written.
void write_pathfinder_sheet(const std::vector<PathfinderImage>& images, const std::string& path, int columns = 8);

}  // namespace attnkit::data
