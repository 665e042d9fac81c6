#pragma once
// The plots of a rank-collapse experiment (analysis/collapse_experiment.h) as LinePlot specs, for
// write_svg / render_svg (report/plot.h).
#include "attnkit/analysis/collapse_experiment.h"
#include "attnkit/report/plot.h"

#include <string>
#include <vector>

namespace attnkit::report {

// Per-layer relative residual (log scale), one series per variant labelled with the variant's
// label, and the relative cumulative bound dashed when it is available.
LinePlot residual_plot(const analysis::CollapseResult& result);
// One variant's per-layer relative residual, one series per kind.
LinePlot kinds_plot(const std::vector<analysis::CollapseResult>& results, analysis::Variant variant);
// The short-path experiment: relative distance, token cosine and (when measured) the
// nearest-embedding agreement against k.
LinePlot short_paths_plot(const analysis::CollapseResult& result);
// Fraction of paths per path length.
LinePlot path_length_plot(const analysis::PathDistribution& paths);

struct NamedPlot {
  std::string file_name;  // e.g. "residual_linear_elu.svg"
  LinePlot plot;
};
// Every plot of the experiment, in the order `attnkit analyze collapse` writes them:
// residual_<kind>.svg and short_paths_<kind>.svg (when measured) per kind, kinds_<variant>.svg
// per variant with several kinds, path_lengths.svg.
std::vector<NamedPlot> collapse_plots(const analysis::CollapseExperiment& experiment);

}  // namespace attnkit::report
