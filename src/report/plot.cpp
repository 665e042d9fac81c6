#include "attnkit/report/plot.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/process.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace attnkit::report {
namespace {

namespace fs = std::filesystem;

// A gnuplot single-quoted string: '' stands for '.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out + "'";
}

bool usable(double y, bool log_y) { return std::isfinite(y) && (!log_y || y > 0); }

// What gnuplot left in `path`: "" when it wrote nothing there, so the caller can say so.
std::string read_output(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec) ? read_file(path) : std::string();
}

}  // namespace

std::string find_gnuplot() {
  if (const char* explicit_path = std::getenv("ATTNKIT_GNUPLOT"); explicit_path && *explicit_path) {
    if (access(explicit_path, X_OK) != 0)
      throw Error(fmt::format("plot: ATTNKIT_GNUPLOT={} is not an executable file", explicit_path));
    return explicit_path;
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/gnuplot";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw Error("plot: gnuplot not found on PATH; install it (apt-get install gnuplot-nox, see "
              "scripts/setup.sh) or set ATTNKIT_GNUPLOT");
}

std::string render_svg(const LinePlot& plot) {
  if (plot.series.empty()) throw Error(fmt::format("plot '{}': no series to draw", plot.title));
  if (plot.width < 100 || plot.height < 100)
    throw Error(fmt::format("plot '{}': size {}x{} is too small (at least 100x100)", plot.title,
                            plot.width, plot.height));
  std::ostringstream data;
  std::vector<size_t> drawn;  // series with at least one usable point, in data-block order
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const Series& s = plot.series[i];
    if (s.x.size() != s.y.size())
      throw Error(fmt::format("plot '{}': series '{}' has {} x values but {} y values", plot.title,
                              s.title, s.x.size(), s.y.size()));
    bool any = false;
    for (size_t p = 0; p < s.x.size(); ++p) any = any || (usable(s.x[p], plot.log_x) && usable(s.y[p], plot.log_y));
    if (!any) continue;
    if (!drawn.empty()) data << "\n\n";  // two blank lines: the next data block (index)
    bool gap = true;  // one blank line breaks the line; never two in a row inside a block
    for (size_t p = 0; p < s.x.size(); ++p) {
      if (usable(s.y[p], plot.log_y) && usable(s.x[p], plot.log_x)) {
        data << fmt::format("{:.17g} {:.17g}\n", s.x[p], s.y[p]);
        gap = false;
      } else if (!gap) {
        data << "\n";
        gap = true;
      }
    }
    drawn.push_back(i);
  }
  if (drawn.empty())
    throw Error(fmt::format("plot '{}': no series has a finite point{}", plot.title,
                            plot.log_y ? " above 0 (log scale)" : ""));

  const std::string gnuplot = find_gnuplot();
  TemporaryDirectory tmp("attnkit-plot");
  const fs::path data_path = tmp.path() / "data.txt", script_path = tmp.path() / "plot.gp",
                 svg_path = tmp.path() / "plot.svg";
  std::ofstream(data_path) << data.str();

  std::ostringstream gp;
  gp << fmt::format("set terminal svg size {},{} noenhanced font 'sans,12' background '#ffffff'\n",
                    plot.width, plot.height);
  gp << "set output " << quoted(svg_path.string()) << "\n";
  gp << "set title " << quoted(plot.title) << "\n";
  gp << "set xlabel " << quoted(plot.x_label) << "\n";
  gp << "set ylabel " << quoted(plot.y_label) << "\n";
  gp << "set grid\nset key below\n";  // under the plot: long series titles never squeeze it

  if (plot.log_y) gp << "set logscale y\nset format y '1e%L'\n";
  if (plot.log_x) gp << "set logscale x 2\n";
  if (plot.y_min != 0 || plot.y_max != 0) gp << fmt::format("set yrange [{:g}:{:g}]\n", plot.y_min, plot.y_max);
  gp << "plot ";
  for (size_t b = 0; b < drawn.size(); ++b) {
    const Series& s = plot.series[drawn[b]];
    const std::string style = s.style == "lines" || s.style == "points" ? s.style : "linespoints";
    gp << (b ? ", \\\n     " : "") << quoted(data_path.string())
       << fmt::format(" index {} using 1:2 with {} lw 2 dt {} title ", b, style, s.dashed ? 2 : 1)
       << quoted(s.title);
  }
  gp << "\nunset output\n";
  std::ofstream(script_path) << gp.str();

  const ProcessResult gnuplot_run = run_process({gnuplot, script_path.string()});
  if (!gnuplot_run.ok()) {
    const std::string why = first_line(gnuplot_run.err);
    throw Error(fmt::format("plot '{}': gnuplot failed: {}", plot.title, why.empty() ? "(no message)" : why));
  }
  std::string svg = read_output(svg_path);
  if (svg.find("<svg") == std::string::npos)
    throw Error(fmt::format("plot '{}': gnuplot wrote no SVG ({})", plot.title, first_line(gnuplot_run.err)));
  return svg;
}

void write_svg(const LinePlot& plot, const std::string& path) {
  io::write_file_atomically(path, render_svg(plot));
}

}  // namespace attnkit::report
