#pragma once
// Figures and the report section of `attnkit analyze heads` (analysis/heads.h): a heat map of
// head importances (layers × heads, drawn as plain SVG rectangles, no gnuplot), the pruning
// profile with its baselines (a gnuplot line plot), and a report section (report/html.h) with
// the headline numbers, the importance and ablation tables and both figures.
#include "attnkit/analysis/heads.h"
#include "attnkit/report/html.h"
#include "attnkit/report/plot.h"

#include <string>
#include <vector>

namespace attnkit::report {

// Self-contained SVG: one cell per head (rows = layers, top = layer 0), shaded from white (the
// table's minimum) to dark blue (its maximum), value printed in each cell; layers may have
// different head counts (pruned models). Throws attnkit::Error for an empty table.
std::string head_heatmap_svg(const analysis::HeadTable& values, const std::string& title);

// Metric against the fraction of heads pruned, one series per profile (named by its order).
LinePlot pruning_profile_plot(const std::vector<analysis::PruningProfile>& profiles,
                              const std::string& metric_name);

// Metric over training steps for each checkpoint of a run: one series per pruned fraction.
LinePlot profile_over_steps_plot(const std::vector<int64_t>& steps,
                                 const std::vector<analysis::PruningProfile>& profiles,
                                 const std::string& metric_name);

struct HeadsReport {
  std::string model;          // what was analysed (directory)
  std::string metric_name;
  analysis::HeadImportance importance;
  analysis::HeadAblation ablation;
  std::vector<analysis::PruningProfile> profiles;  // importance first, then baselines
};

// The section (id "heads"), with figures rendered (the profile needs gnuplot).
Section heads_section(const HeadsReport& report, int order = 60);

// A table as text cells: "L{layer}" rows, one column per head (blank where a layer has fewer).
Table head_table(const analysis::HeadTable& values, const std::string& caption, int precision = 3);

}  // namespace attnkit::report
