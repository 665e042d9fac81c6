#pragma once
// Line plots as SVG through gnuplot (Debian package gnuplot-nox, installed by scripts/setup.sh).
// The data and the script go to a private temporary directory; gnuplot writes the SVG there and
// the directory is removed afterwards. Titles and labels are quoted for gnuplot (no enhanced-text
// markup, so "_" and "^" print as they are).
#include <string>
#include <utility>
#include <vector>

namespace attnkit::report {

struct Series {
  std::string title;
  std::vector<double> x, y;  // same length; non-finite y (and y <= 0 on a log axis) are gaps
  std::string style = "linespoints";  // "lines", "points" or "linespoints"
  bool dashed = false;
};

struct LinePlot {
  LinePlot() = default;
  LinePlot(std::string title_, std::string x_label_, std::string y_label_, bool log_y_ = false)
      : title(std::move(title_)), x_label(std::move(x_label_)), y_label(std::move(y_label_)), log_y(log_y_) {}

  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_y = false;
  bool log_x = false;  // x > 0 only (other points are gaps)
  double y_min = 0, y_max = 0;  // both 0 = automatic range
  int width = 760, height = 520;
  std::vector<Series> series;
};

// The gnuplot executable: $ATTNKIT_GNUPLOT if set, else "gnuplot" found on PATH. Throws
// attnkit::Error "gnuplot not found ..." (how to install it) when there is none.
std::string find_gnuplot();

// The SVG text of the plot. Throws attnkit::Error for an empty plot, series whose x and y
// lengths differ, a missing gnuplot, or gnuplot failing (with its first error line).
std::string render_svg(const LinePlot& plot);

// render_svg written to `path` (atomically).
void write_svg(const LinePlot& plot, const std::string& path);

}  // namespace attnkit::report
