#include "attnkit/report/plot.h"

#include "attnkit/error.h"
#include "attnkit/file.h"
#include "attnkit/io/atomic_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

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

// A private directory removed when it goes out of scope.
class TempDirectory {
 public:
  TempDirectory() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/attnkit-plot-XXXXXX";
    if (!mkdtemp(pattern.data()))
      throw Error(fmt::format("plot: cannot create a temporary directory like {}", pattern));
    path_ = pattern;
  }
  ~TempDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string first_line(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
  return "(no message)";
}

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
    for (size_t p = 0; p < s.x.size(); ++p) any = any || (std::isfinite(s.x[p]) && usable(s.y[p], plot.log_y));
    if (!any) continue;
    if (!drawn.empty()) data << "\n\n";  // two blank lines: the next data block (index)
    bool gap = true;  // one blank line breaks the line; never two in a row inside a block
    for (size_t p = 0; p < s.x.size(); ++p) {
      if (usable(s.y[p], plot.log_y) && std::isfinite(s.x[p])) {
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
  TempDirectory tmp;
  const fs::path data_path = tmp.path() / "data.txt", script_path = tmp.path() / "plot.gp",
                 svg_path = tmp.path() / "plot.svg", err_path = tmp.path() / "stderr.txt";
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

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string arg0 = gnuplot, arg1 = script_path.string();
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, gnuplot.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw Error(fmt::format("plot: cannot run {}: {}", gnuplot, std::strerror(spawned)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(fmt::format("plot '{}': gnuplot failed: {}", plot.title, first_line(read_output(err_path))));
  std::string svg = read_output(svg_path);
  if (svg.find("<svg") == std::string::npos)
    throw Error(fmt::format("plot '{}': gnuplot wrote no SVG ({})", plot.title, first_line(read_output(err_path))));
  return svg;
}

void write_svg(const LinePlot& plot, const std::string& path) {
  io::write_file_atomically(path, render_svg(plot));
}

}  // namespace attnkit::report
