// report/collapse_plots: the plots of a rank-collapse experiment (SVG through gnuplot).
#include "attnkit/report/collapse_plots.h"

#include <gtest/gtest.h>

#include <map>

namespace {

using namespace attnkit::analysis;
using namespace attnkit::report;

const CollapseExperiment& experiment() {
  static const CollapseExperiment e = [] {
    CollapseExperimentOptions o;
    o.config = random_stack_config("bert", {2, 2, 8, 0, 20}, 5);
    o.kinds = {"softmax", "linear:elu"};
    o.seeds = 1;
    o.samples = 2;
    o.seq_len = 5;
    o.analysis.variants = {Variant::PureAttention, Variant::AttentionSkip};
    o.analysis.subsets = 1;
    return run_collapse_experiment(o);
  }();
  return e;
}

void expect_contains(const std::string& svg, const std::vector<std::string>& texts) {
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  for (const auto& text : texts) EXPECT_NE(svg.find(text), std::string::npos) << text;
}

TEST(CollapsePlots, NamesInTheOrderTheCommandWritesThem) {
  std::vector<std::string> names;
  for (const auto& plot : collapse_plots(experiment())) names.push_back(plot.file_name);
  EXPECT_EQ(names, (std::vector<std::string>{"residual_softmax.svg", "short_paths_softmax.svg",
                                             "residual_linear_elu.svg", "short_paths_linear_elu.svg",
                                             "kinds_pure_attention.svg", "kinds_attention_skip.svg",
                                             "path_lengths.svg"}));
  CollapseExperiment one = experiment();
  one.results.resize(1);  // one kind: no per-kind comparison
  one.results[0].short_paths.clear();
  names.clear();
  for (const auto& plot : collapse_plots(one)) names.push_back(plot.file_name);
  EXPECT_EQ(names, (std::vector<std::string>{"residual_softmax.svg", "path_lengths.svg"}));
}

TEST(CollapsePlots, ResidualPlotHasEveryVariantAndTheBound) {
  const LinePlot plot = residual_plot(experiment().results[0]);
  EXPECT_TRUE(plot.log_y);
  ASSERT_EQ(plot.series.size(), 3u);
  EXPECT_TRUE(plot.series[2].dashed);
  expect_contains(render_svg(plot), {"softmax: relative residual per layer", "pure attention",
                                     "attention + skip", "bound, pure attention (gamma=1)"});
  // linear attention has no bound series
  EXPECT_EQ(residual_plot(experiment().results[1]).series.size(), 2u);
}

TEST(CollapsePlots, KindsShortPathsAndPathLengths) {
  const LinePlot kinds = kinds_plot(experiment().results, Variant::PureAttention);
  ASSERT_EQ(kinds.series.size(), 2u);
  expect_contains(render_svg(kinds), {"pure attention per attention kind", "softmax", "linear:elu"});
  const LinePlot short_paths = short_paths_plot(experiment().results[0]);
  EXPECT_EQ(short_paths.series[0].x, (std::vector<double>{0, 1, 2}));
  expect_contains(render_svg(short_paths), {"||Y_k - Y||_F / ||Y||_F", "token cosine(Y_k, Y)"});
  const LinePlot paths = path_length_plot(experiment().paths);
  EXPECT_EQ(paths.series.at(0).y.size(), 3u);
  expect_contains(render_svg(paths), {"Path lengths, 2 layers x 2 heads", "C(L,k) H^k / (1+H)^L"});
}

}  // namespace
