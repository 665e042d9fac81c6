#include "attnkit/report/collapse_plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace attnkit::report {
namespace {

using analysis::CollapseResult;

std::vector<double> layer_axis(size_t count) {
  std::vector<double> x;
  for (size_t l = 0; l < count; ++l) x.push_back(double(l));
  return x;
}

// Log axis from a decade below the lowest positive value (not below 1e-18) to 10.
void set_log_range(LinePlot& plot, double lowest) {
  plot.y_min = std::max(1e-18, lowest / 10);
  plot.y_max = 10;
}

double lowest_positive(const std::vector<double>& values, double lowest) {
  for (double v : values)
    if (v > 0) lowest = std::min(lowest, v);
  return lowest;
}

// Where X vanished the relative residual is undefined: the line stops there, and says why.
std::string vanished_note(const analysis::VariantCurve& curve) {
  const int64_t from = curve.vanished_from_layer();
  if (from < 0) return "";
  return fmt::format(" (X = 0 from layer {} in {} input(s): undefined there)", from,
                     curve.layers[size_t(from)].vanished);
}

}  // namespace

LinePlot residual_plot(const CollapseResult& r) {
  LinePlot plot;
  plot.title = fmt::format("{}: relative residual per layer ({} layers, {} heads, {} models x {} inputs each)",
                           r.kind, r.layers, r.heads, r.models, r.inputs / std::max<int64_t>(r.models, 1));
  plot.x_label = "layer";
  plot.y_label = "||res(X)||_{1,inf} / ||X||_{1,inf} (geometric mean)";
  plot.log_y = true;
  double lowest = 1.0;
  for (const auto& curve : r.curves) {
    Series s;
    s.title = analysis::variant_info(curve.variant).label + vanished_note(curve);
    s.x = layer_axis(curve.layers.size());
    s.y = analysis::geometric_means(curve);
    lowest = lowest_positive(s.y, lowest);
    plot.series.push_back(std::move(s));
  }
  if (r.bound.available) {
    Series s;
    s.title = fmt::format("bound, pure attention (gamma={:g})", r.bound.gamma);
    s.dashed = true;
    s.style = "lines";
    double lowest_bound = INFINITY;
    for (size_t l = 1; l < r.bound.layers.size(); ++l) {
      const double log10_bound = r.bound.layers[l].log10_relative_bound.spread().mean;
      lowest_bound = std::min(lowest_bound, log10_bound);
      s.x.push_back(double(l));
      s.y.push_back(std::pow(10.0, log10_bound));
    }
    if (lowest_bound > 1) s.title += fmt::format(": off the scale, >= 1e{:.0f}", std::floor(lowest_bound));
    plot.series.push_back(std::move(s));
  }
  set_log_range(plot, lowest);
  return plot;
}

LinePlot kinds_plot(const std::vector<CollapseResult>& results, analysis::Variant variant) {
  LinePlot plot;
  plot.title = fmt::format("{} per attention kind", analysis::variant_info(variant).label);
  plot.x_label = "layer";
  plot.y_label = "relative residual (composite norm, geometric mean)";
  plot.log_y = true;
  double lowest = 1.0;
  for (const auto& r : results)
    for (const auto& curve : r.curves)
      if (curve.variant == variant) {
        Series s;
        s.title = r.kind + vanished_note(curve);
        s.x = layer_axis(curve.layers.size());
        s.y = analysis::geometric_means(curve);
        lowest = lowest_positive(s.y, lowest);
        plot.series.push_back(std::move(s));
      }
  set_log_range(plot, lowest);
  return plot;
}

LinePlot short_paths_plot(const CollapseResult& r) {
  LinePlot plot;
  plot.title = fmt::format("{}: attention kept in k of {} layers (full block otherwise)", r.kind, r.layers);
  plot.x_label = "k (layers whose attention is kept)";
  plot.y_label = "mean over inputs and layer subsets";
  Series distance{"||Y_k - Y||_F / ||Y||_F", {}, {}}, cosine{"token cosine(Y_k, Y)", {}, {}},
      agreement{"nearest-embedding agreement", {}, {}};
  for (const auto& p : r.short_paths) {
    distance.x.push_back(double(p.k));
    distance.y.push_back(p.relative_distance.spread().mean);
    cosine.x.push_back(double(p.k));
    cosine.y.push_back(p.cosine.spread().mean);
    if (!p.prediction_agreement.values.empty()) {
      agreement.x.push_back(double(p.k));
      agreement.y.push_back(p.prediction_agreement.spread().mean);
    }
  }
  plot.series = {distance, cosine};
  if (!agreement.x.empty()) plot.series.push_back(agreement);
  return plot;
}

LinePlot path_length_plot(const analysis::PathDistribution& d) {
  LinePlot plot;
  plot.title = fmt::format("Path lengths, {} layers x {} heads: C(L,k) H^k of (1+H)^L = {:.3g} paths",
                           d.layers, d.heads, d.total.to_double());
  plot.x_label = "path length k (attention heads on the path)";
  plot.y_label = "fraction of paths";
  Series s{"C(L,k) H^k / (1+H)^L", {}, {}};
  for (const auto& p : d.lengths) {
    s.x.push_back(double(p.length));
    s.y.push_back(p.fraction);
  }
  plot.series.push_back(std::move(s));
  return plot;
}

std::vector<NamedPlot> collapse_plots(const analysis::CollapseExperiment& e) {
  std::vector<NamedPlot> plots;
  for (const auto& r : e.results) {
    const std::string kind = analysis::file_name_part(r.kind);
    plots.push_back({"residual_" + kind + ".svg", residual_plot(r)});
    if (!r.short_paths.empty()) plots.push_back({"short_paths_" + kind + ".svg", short_paths_plot(r)});
  }
  if (e.results.size() > 1)
    for (analysis::Variant v : e.variants)
      plots.push_back({std::string("kinds_") + analysis::variant_info(v).name + ".svg", kinds_plot(e.results, v)});
  plots.push_back({"path_lengths.svg", path_length_plot(e.paths)});
  return plots;
}

}  // namespace attnkit::report
