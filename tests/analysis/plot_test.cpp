// report/plot: SVG line plots through gnuplot (needs gnuplot-nox, see scripts/setup.sh).
#include "attnkit/report/plot.h"
#include "support/test_files.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

namespace {

using attnkit::report::LinePlot;
using attnkit::report::render_svg;
using attnkit::report::Series;
using attnkit::testing::error_of;

LinePlot two_series() {
  LinePlot plot;
  plot.title = "residual_per layer 'quoted' ^2";
  plot.x_label = "layer";
  plot.y_label = "relative residual";
  plot.log_y = true;
  plot.series.push_back(Series{"pure attention", {0, 1, 2, 3}, {1.0, 1e-3, 0.0, NAN}});
  plot.series.push_back(Series{"attention + skip", {0, 1, 2, 3}, {1.0, 0.9, 0.8, 0.7}, "lines", true});
  return plot;
}

TEST(Plot, WritesAnSvgWithTitlesAndEverySeries) {
  const std::string svg = render_svg(two_series());
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  // noenhanced: underscores and carets print as they are; quotes survive gnuplot quoting.
  EXPECT_NE(svg.find("residual_per layer 'quoted' ^2"), std::string::npos) << svg.substr(0, 2000);
  EXPECT_NE(svg.find("pure attention"), std::string::npos);
  EXPECT_NE(svg.find("attention + skip"), std::string::npos);
  EXPECT_NE(svg.find("1e-3"), std::string::npos);  // log axis labels
}

TEST(Plot, WriteSvgCreatesTheFile) {
  const auto dir = attnkit::testing::scratch_directory("plot");
  const auto path = (dir / "p.svg").string();
  attnkit::report::write_svg(two_series(), path);
  EXPECT_NE(attnkit::testing::read_bytes(path).find("<svg"), std::string::npos);
}

TEST(Plot, BadPlotsAreErrors) {
  LinePlot empty;
  empty.title = "nothing";
  EXPECT_NE(error_of([&] { render_svg(empty); }).find("no series"), std::string::npos);
  LinePlot mismatch = two_series();
  mismatch.series[0].y.pop_back();
  EXPECT_NE(error_of([&] { render_svg(mismatch); }).find("4 x values but 3 y values"), std::string::npos);
  LinePlot nothing_positive;
  nothing_positive.log_y = true;
  nothing_positive.series.push_back(Series{"zeros", {0, 1}, {0.0, -1.0}});
  EXPECT_NE(error_of([&] { render_svg(nothing_positive); }).find("log scale"), std::string::npos);
}

TEST(Plot, MissingGnuplotIsAClearError) {
  const char* old = std::getenv("ATTNKIT_GNUPLOT");
  const std::string saved = old ? old : "";
  setenv("ATTNKIT_GNUPLOT", "/nonexistent/gnuplot", 1);
  const std::string message = error_of([] { render_svg(two_series()); });
  if (old) setenv("ATTNKIT_GNUPLOT", saved.c_str(), 1);
  else unsetenv("ATTNKIT_GNUPLOT");
  EXPECT_NE(message.find("ATTNKIT_GNUPLOT=/nonexistent/gnuplot is not an executable"), std::string::npos)
      << message;
  // And gnuplot failing (a program that exits 1) is reported, not ignored.
  setenv("ATTNKIT_GNUPLOT", "/bin/false", 1);
  const std::string failed = error_of([] { render_svg(two_series()); });
  if (old) setenv("ATTNKIT_GNUPLOT", saved.c_str(), 1);
  else unsetenv("ATTNKIT_GNUPLOT");
  EXPECT_NE(failed.find("gnuplot failed"), std::string::npos) << failed;
}

}  // namespace
