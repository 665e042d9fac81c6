#include "attnkit/data/pathfinder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "uniform_draws.h"

namespace attnkit::data {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr char kMagic[8] = {'A', 'P', 'A', 'T', 'H', 'F', '0', '1'};
constexpr size_t kHeaderBytes = 20;
constexpr int kTurnTries = 20;        // turns tried for one paddle
constexpr int kContourTries = 50;     // starts tried for one contour
constexpr int kImageTries = 10000;    // images started before giving up

using detail::uniform_below;
using detail::uniform_unit;

double uniform_between(std::mt19937_64& rng, double low, double high) {
  return low + (high - low) * uniform_unit(rng);
}

int round_to_pixel(double v) { return static_cast<int>(std::floor(v + 0.5)); }

struct Pixel {
  int x, y;
};

// The pixels of the 8-connected Bresenham line from a to b, without a.
void line_pixels(Pixel a, Pixel b, std::vector<Pixel>& out) {
  out.clear();
  const int dx = std::abs(b.x - a.x), dy = -std::abs(b.y - a.y);
  const int sx = a.x < b.x ? 1 : -1, sy = a.y < b.y ? 1 : -1;
  int error = dx + dy;
  int x = a.x, y = a.y;
  while (x != b.x || y != b.y) {
    const int e2 = 2 * error;
    if (e2 >= dy) {
      error += dy;
      x += sx;
    }
    if (e2 <= dx) {
      error += dx;
      y += sy;
    }
    out.push_back({x, y});
  }
}

// Who owns each pixel while an image is drawn: the contour (-1: nobody) and the paddle that drew it.
class Canvas {
 public:
  Canvas(const PathfinderOptions& o) : o_(o), owner_(static_cast<size_t>(o.size * o.size), -1),
                                       paddle_(owner_.size(), 0) {}

  void clear() { std::fill(owner_.begin(), owner_.end(), -1); }

  bool inside(Pixel p) const {
    return p.x >= o_.margin && p.y >= o_.margin && p.x < o_.size - o_.margin && p.y < o_.size - o_.margin;
  }

  // Pixel p may be drawn by paddle `paddle` of `contour`: inside, and no pixel within the
  // clearance belongs to another contour or to this one's paddles older than paddle - 2.
  // paddle < 0 (markers): any pixel of the same contour is fine.
  bool allowed(Pixel p, int contour, int paddle) const {
    if (!inside(p)) return false;
    const int c = o_.clearance;
    for (int y = std::max(0, p.y - c); y <= std::min(o_.size - 1, p.y + c); ++y) {
      for (int x = std::max(0, p.x - c); x <= std::min(o_.size - 1, p.x + c); ++x) {
        const size_t i = index({x, y});
        const int owner = owner_[i];
        if (owner < 0) continue;
        if (owner != contour) return false;
        if (paddle >= 0 && paddle_[i] < paddle - 2) return false;
      }
    }
    return true;
  }

  // Marks p as drawn; returns whether it was new (so an undo clears only what this call set).
  bool mark(Pixel p, int contour, int paddle) {
    const size_t i = index(p);
    if (owner_[i] >= 0) return false;
    owner_[i] = contour;
    paddle_[i] = paddle;
    return true;
  }
  void unmark(Pixel p) { owner_[index(p)] = -1; }
  bool lit(size_t i) const { return owner_[i] >= 0; }

 private:
  size_t index(Pixel p) const { return static_cast<size_t>(p.y) * static_cast<size_t>(o_.size) + p.x; }
  const PathfinderOptions& o_;
  std::vector<int> owner_;
  std::vector<int> paddle_;
};

// One contour drawn on the canvas: its new pixels (for an undo) and its two end pixels.
struct Contour {
  std::vector<Pixel> pixels;
  Pixel ends[2] = {{0, 0}, {0, 0}};
};

class ImageDrawer {
 public:
  ImageDrawer(const PathfinderOptions& o, std::mt19937_64& rng) : o_(o), rng_(rng), canvas_(o) {
    // Disc offsets of a marker: the pixels within marker_radius of its centre.
    const int r = static_cast<int>(std::ceil(o.marker_radius));
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx)
        if (dx * dx + dy * dy <= o.marker_radius * o.marker_radius) disc_.push_back({dx, dy});
  }

  // Draws one image with `label`; false when a contour could not be placed.
  bool draw(int label, PathfinderImage& image) {
    canvas_.clear();
    Contour first, second;
    // Markers: positive on both ends of the first contour; negative on one end of each.
    const int first_markers = label == 1 ? 2 : 1;
    const int second_markers = label == 1 ? 0 : 1;
    Pixel markers[2];
    if (!contour_with_markers(0, o_.paddles, first_markers, first, markers)) return false;
    if (!contour_with_markers(1, o_.paddles, second_markers, second, markers + 1)) return false;
    for (int d = 0; d < o_.distractors; ++d) {
      Contour distractor;
      if (!contour_with_markers(2 + d, o_.distractor_paddles, 0, distractor, nullptr)) return false;
    }
    image.size = o_.size;
    image.label = label;
    image.pixels.assign(static_cast<size_t>(o_.size * o_.size), 0);
    for (size_t i = 0; i < image.pixels.size(); ++i)
      if (canvas_.lit(i)) image.pixels[i] = o_.intensity;
    for (int m = 0; m < 2; ++m) {
      image.marker_x[m] = markers[m].x;
      image.marker_y[m] = markers[m].y;
    }
    return true;
  }

 private:
  // Draws contour `id` of `paddles` paddles and `marker_count` markers on its ends (for one
  // marker, a random end), writing the marker centres to `markers`. Tries kContourTries starts.
  bool contour_with_markers(int id, int paddles, int marker_count, Contour& contour, Pixel* markers) {
    for (int attempt = 0; attempt < kContourTries; ++attempt) {
      if (!grow(id, paddles, contour)) continue;
      const int first_end = marker_count == 1 ? static_cast<int>(uniform_below(rng_, 2)) : 0;
      bool ok = true;
      std::vector<Pixel> disc_pixels;
      for (int m = 0; m < marker_count && ok; ++m) {
        const Pixel centre = contour.ends[(first_end + m) % 2];
        for (Pixel d : disc_) {
          const Pixel p{centre.x + d.x, centre.y + d.y};
          if (!canvas_.allowed(p, id, -1)) {
            ok = false;
            break;
          }
          if (canvas_.mark(p, id, paddles + 1)) disc_pixels.push_back(p);
        }
        if (ok && markers) markers[m] = centre;
      }
      if (ok) return true;
      for (Pixel p : disc_pixels) canvas_.unmark(p);
      for (Pixel p : contour.pixels) canvas_.unmark(p);
    }
    return false;
  }

  // Grows a contour from a random start; on failure leaves the canvas as it was.
  bool grow(int id, int paddles, Contour& contour) {
    contour.pixels.clear();
    const double low = o_.margin, high = o_.size - 1 - o_.margin;
    double x = uniform_between(rng_, low, high), y = uniform_between(rng_, low, high);
    double angle = uniform_between(rng_, 0, 2 * kPi);
    Pixel at{round_to_pixel(x), round_to_pixel(y)};
    if (!canvas_.allowed(at, id, 0)) return false;
    canvas_.mark(at, id, 0);
    contour.pixels.push_back(at);
    contour.ends[0] = at;
    const double max_turn = o_.max_turn_degrees * kPi / 180.0;
    std::vector<Pixel> line;
    for (int paddle = 1; paddle <= paddles; ++paddle) {
      bool placed = false;
      for (int attempt = 0; attempt < kTurnTries && !placed; ++attempt) {
        const double turned = paddle == 1 ? angle : angle + uniform_between(rng_, -max_turn, max_turn);
        const double nx = x + o_.paddle_length * std::cos(turned), ny = y + o_.paddle_length * std::sin(turned);
        const Pixel end{round_to_pixel(nx), round_to_pixel(ny)};
        line_pixels(at, end, line);
        if (!std::all_of(line.begin(), line.end(), [&](Pixel p) { return canvas_.allowed(p, id, paddle); })) continue;
        for (Pixel p : line)
          if (canvas_.mark(p, id, paddle)) contour.pixels.push_back(p);
        x = nx;
        y = ny;
        angle = turned;
        at = end;
        placed = true;
      }
      if (!placed) {
        for (Pixel p : contour.pixels) canvas_.unmark(p);
        contour.pixels.clear();
        return false;
      }
    }
    contour.ends[1] = at;
    return true;
  }

  const PathfinderOptions& o_;
  std::mt19937_64& rng_;
  Canvas canvas_;
  std::vector<Pixel> disc_;
};

Error options_error(const std::string& what) { return Error("Pathfinder options: " + what); }

}  // namespace

// ---------------------------------------------------------------------------------------------
PathfinderOptions pathfinder_options(int size) {
  if (size < 8 || size > 1024) throw options_error(fmt::format("size must be in 8..1024, got {}", size));
  PathfinderOptions o;
  const double scale = size / 32.0;
  o.size = size;
  o.paddle_length *= scale;
  o.marker_radius *= scale;
  o.margin = std::max(1, round_to_pixel(o.margin * scale));
  o.clearance = std::max(1, round_to_pixel(o.clearance * scale));
  return o;
}

void check_pathfinder_options(const PathfinderOptions& o) {
  if (o.size < 8 || o.size > 1024) throw options_error(fmt::format("size must be in 8..1024, got {}", o.size));
  if (o.paddles < 1) throw options_error(fmt::format("paddles must be >= 1, got {}", o.paddles));
  if (o.distractors < 0) throw options_error(fmt::format("distractors must be >= 0, got {}", o.distractors));
  if (o.distractors > 0 && o.distractor_paddles < 1)
    throw options_error(fmt::format("distractor_paddles must be >= 1, got {}", o.distractor_paddles));
  if (!(o.paddle_length >= 1.0 && o.paddle_length <= o.size))
    throw options_error(fmt::format("paddle_length must be in 1..size ({}), got {}", o.size, o.paddle_length));
  if (!(o.max_turn_degrees >= 0.0 && o.max_turn_degrees <= 90.0))
    throw options_error(fmt::format("max_turn_degrees must be in 0..90, got {}", o.max_turn_degrees));
  if (!(o.marker_radius >= 0.0)) throw options_error(fmt::format("marker_radius must be >= 0, got {}", o.marker_radius));
  if (o.margin < 0) throw options_error(fmt::format("margin must be >= 0, got {}", o.margin));
  if (o.clearance < 1) throw options_error(fmt::format("clearance must be >= 1, got {}", o.clearance));
  if (o.intensity == 0) throw options_error("intensity must be >= 1, got 0");
  const double room = o.size - 2.0 * o.margin - 2.0 * o.marker_radius;
  const double length = o.paddles * o.paddle_length;
  if (room < 1.0 || length > 2.0 * room)
    throw options_error(fmt::format("target contours of {} paddles x {} px do not fit a {}x{} image with margin {} "
                                    "and marker radius {} (at most 2 x {} px)",
                                    o.paddles, o.paddle_length, o.size, o.size, o.margin, o.marker_radius,
                                    std::max(0.0, room)));
}

PathfinderGenerator::PathfinderGenerator(const PathfinderOptions& options, uint64_t seed)
    : options_(options), rng_(seed) {
  check_pathfinder_options(options_);
}

PathfinderImage PathfinderGenerator::next() {
  int label;
  if (pending_label_ >= 0) {
    label = pending_label_;
    pending_label_ = -1;
  } else {
    label = static_cast<int>(uniform_below(rng_, 2));
    pending_label_ = 1 - label;
  }
  ImageDrawer drawer(options_, rng_);
  PathfinderImage image;
  for (int attempt = 0; attempt < kImageTries; ++attempt)
    if (drawer.draw(label, image)) return image;
  throw Error(fmt::format("Pathfinder generator: {} images in a row could not place every contour ({} targets of {} "
                          "paddles, {} distractors of {}) in {}x{} pixels; use fewer or shorter contours",
                          kImageTries, 2, options_.paddles, options_.distractors, options_.distractor_paddles,
                          options_.size, options_.size));
}

std::vector<PathfinderImage> generate_pathfinder(const PathfinderOptions& options, uint64_t seed, size_t count) {
  PathfinderGenerator generator(options, seed);
  std::vector<PathfinderImage> images;
  images.reserve(count);
  for (size_t i = 0; i < count; ++i) images.push_back(generator.next());
  return images;
}

bool pathfinder_markers_connected(const PathfinderImage& image, uint8_t threshold) {
  if (threshold < 1) throw Error("pathfinder_markers_connected: threshold must be >= 1");
  const int n = image.size;
  if (n < 1 || image.pixels.size() != static_cast<size_t>(n) * n)
    throw Error(fmt::format("pathfinder_markers_connected: {} pixels for a {}x{} image", image.pixels.size(), n, n));
  auto at = [&](int x, int y) { return static_cast<size_t>(y) * n + x; };
  std::vector<char> seen(image.pixels.size(), 0);
  std::vector<Pixel> stack;
  auto push = [&](int x, int y) {
    if (x < 0 || y < 0 || x >= n || y >= n) return;
    const size_t i = at(x, y);
    if (seen[i] || image.pixels[i] < threshold) return;
    seen[i] = 1;
    stack.push_back({x, y});
  };
  push(image.marker_x[0], image.marker_y[0]);
  while (!stack.empty()) {
    const Pixel p = stack.back();
    stack.pop_back();
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) push(p.x + dx, p.y + dy);
  }
  return seen[at(image.marker_x[1], image.marker_y[1])] != 0;
}

// ---------------------------------------------------------------------------------------------
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t get_u32(const std::string& in, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

std::string header(int size, size_t count) {
  std::string out(kMagic, sizeof kMagic);
  put_u32(out, static_cast<uint32_t>(size));
  put_u32(out, static_cast<uint32_t>(size));
  put_u32(out, static_cast<uint32_t>(count));
  return out;
}

}  // namespace

void write_pathfinder_file(const PathfinderSet& set, const std::string& path) {
  const size_t area = static_cast<size_t>(set.size) * set.size;
  if (set.size < 1 || set.pixels.size() != set.count() * area)
    throw Error(fmt::format("{}: {} pixels for {} images of {}x{}", path, set.pixels.size(), set.count(), set.size, set.size));
  io::write_file_atomically(path, [&](std::FILE* file) {
    const std::string head = header(set.size, set.count());
    std::fwrite(head.data(), 1, head.size(), file);
    for (size_t i = 0; i < set.count(); ++i) {
      std::fputc(set.labels[i], file);
      std::fwrite(set.pixels.data() + i * area, 1, area, file);
    }
  });
}

PathfinderSet read_pathfinder_file(const std::string& path) {
  const std::string content = read_file(path, "Pathfinder file");
  if (content.size() < kHeaderBytes || std::memcmp(content.data(), kMagic, sizeof kMagic) != 0)
    throw Error(fmt::format("{}: not a Pathfinder file (no APATHF01 header; write one with `attnkit data lra-pathfinder`)",
                            path));
  const uint32_t width = get_u32(content, 8), height = get_u32(content, 12), count = get_u32(content, 16);
  if (width != height || width < 1 || width > 1024)
    throw Error(fmt::format("{}: image size {}x{} is not square in 1..1024", path, width, height));
  const size_t record = 1 + static_cast<size_t>(width) * height;
  const size_t expected = kHeaderBytes + record * count;
  if (content.size() != expected)
    throw Error(fmt::format("{}: {} bytes, but the header's {} images of {}x{} need {} (truncated or corrupt)", path,
                            content.size(), count, width, height, expected));
  PathfinderSet set;
  set.size = static_cast<int>(width);
  set.labels.resize(count);
  set.pixels.resize(static_cast<size_t>(count) * (record - 1));
  for (size_t i = 0; i < count; ++i) {
    const char* r = content.data() + kHeaderBytes + i * record;
    const auto label = static_cast<uint8_t>(r[0]);
    if (label > 1) throw Error(fmt::format("{}: image {} has label {}, not 0 or 1", path, i, label));
    set.labels[i] = label;
    std::memcpy(set.pixels.data() + i * (record - 1), r + 1, record - 1);
  }
  return set;
}

std::string pathfinder_file_name(int size, const std::string& split) {
  return fmt::format("pathfinder{}_{}.bin", size, split);
}

PathfinderSplitFiles write_pathfinder_splits(const PathfinderSplitOptions& options, const std::string& directory) {
  check_pathfinder_options(options.generator);
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the directory ({})", directory, ec.message()));
  const std::filesystem::path dir(directory);
  const int size = options.generator.size;
  PathfinderSplitFiles files{(dir / pathfinder_file_name(size, "train")).string(),
                             (dir / pathfinder_file_name(size, "val")).string(),
                             (dir / pathfinder_file_name(size, "test")).string()};
  const size_t area = static_cast<size_t>(size) * size;
  auto write_split = [&](const std::string& path, uint64_t k, size_t count) {
    PathfinderGenerator generator(options.generator, options.seed * 4 + k + 1);
    // Streamed: one image in memory at a time (Pathfinder-X splits are gigabytes).
    io::write_file_atomically(path, [&](std::FILE* file) {
      const std::string head = header(size, count);
      std::fwrite(head.data(), 1, head.size(), file);
      for (size_t i = 0; i < count; ++i) {
        const PathfinderImage image = generator.next();
        std::fputc(image.label, file);
        std::fwrite(image.pixels.data(), 1, area, file);
      }
    });
  };
  write_split(files.train, 0, options.train_count);
  write_split(files.validation, 1, options.validation_count);
  write_split(files.test, 2, options.test_count);
  return files;
}

// ---------------------------------------------------------------------------------------------
void write_pathfinder_sheet(const std::vector<PathfinderImage>& images, const std::string& path, int columns) {
  if (images.empty()) throw Error(fmt::format("{}: no images for the sample sheet", path));
  if (columns < 1) throw Error(fmt::format("{}: columns must be >= 1, got {}", path, columns));
  const int n = images.front().size;
  for (const auto& image : images)
    if (image.size != n || image.pixels.size() != static_cast<size_t>(n) * n)
      throw Error(fmt::format("{}: sample images must all be {}x{}", path, n, n));
  const auto extension = std::filesystem::path(path).extension().string();
  const int count = static_cast<int>(images.size());
  const int cols = std::min(columns, count), rows = (count + cols - 1) / cols;
  if (extension == ".pgm") {
    const int gap = 2, width = cols * n + (cols + 1) * gap, height = rows * n + (rows + 1) * gap;
    std::string out = fmt::format("P5\n{} {}\n255\n", width, height);
    const size_t start = out.size();
    out.resize(start + static_cast<size_t>(width) * height, static_cast<char>(128));
    for (int k = 0; k < count; ++k) {
      const int x0 = gap + (k % cols) * (n + gap), y0 = gap + (k / cols) * (n + gap);
      for (int y = 0; y < n; ++y)
        for (int x = 0; x < n; ++x)
          out[start + static_cast<size_t>(y0 + y) * width + x0 + x] =
              static_cast<char>(images[k].pixels[static_cast<size_t>(y) * n + x]);
    }
    io::write_file_atomically(path, out);
    return;
  }
  if (extension != ".svg")
    throw Error(fmt::format("{}: the sample sheet must be .svg or .pgm, got '{}'", path, extension));
  // One SVG unit per pixel; each cell is the image plus a caption line.
  const int gap = std::max(2, n / 8), caption = std::max(6, n / 4);
  const int cell_w = n + gap, cell_h = n + caption + gap;
  const int width = cols * cell_w + gap, height = rows * cell_h + gap;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
      "shape-rendering=\"crispEdges\">\n<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
      width, height, width * 8, height * 8, width, height);
  for (int k = 0; k < count; ++k) {
    const auto& image = images[k];
    const int x0 = gap + (k % cols) * cell_w, y0 = gap + (k / cols) * cell_h;
    out += fmt::format("<g transform=\"translate({} {})\">\n<rect width=\"{}\" height=\"{}\" fill=\"#000000\"/>\n", x0, y0, n, n);
    // One rect per run of equal lit pixels in a row.
    for (int y = 0; y < n; ++y) {
      const uint8_t* row = image.pixels.data() + static_cast<size_t>(y) * n;
      for (int x = 0; x < n;) {
        int end = x + 1;
        while (end < n && row[end] == row[x]) ++end;
        if (const int v = row[x])
          out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"1\" fill=\"#{:02x}{:02x}{:02x}\"/>\n", x, y,
                             end - x, v, v, v);
        x = end;
      }
    }
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-family=\"sans-serif\" font-size=\"{:.2f}\" text-anchor=\"middle\">{}</text>\n</g>\n",
                       n / 2.0, n + caption * 0.8, std::min(caption * 0.7, n / 7.0), image.label ? "connected" : "not connected");
  }
  out += "</svg>\n";
  io::write_file_atomically(path, out);
}

}  // namespace attnkit::data
