#pragma once
// Figures and the report section of `attnkit analyze heads` (analysis/heads.h): a heat map of
// head importances (layers × heads, drawn as plain SVG rectangles, no gnuplot), the pruning
// profile with its baselines (a gnuplot line plot), a report section (report/html.h) with
// the headline numbers, the importance and ablation tables and both figures, and the command's
// output folder (analysis/heads_experiment.h's experiment written out).
#include "attnkit/analysis/heads.h"
#include "attnkit/analysis/heads_experiment.h"
#include "attnkit/report/html.h"
#include "attnkit/report/plot.h"

#include <string>
#include <vector>

namespace attnkit::report {

// Row labels of head tables: "L{layer}" for a model with one attention site, "{site} L{layer}"
// with several (analysis::SiteRows; rows beyond the sites' are labelled "L{row}").
std::vector<std::string> head_row_labels(const std::vector<analysis::SiteRows>& sites, size_t rows);

// Self-contained SVG: one cell per head (rows = layers of each site, top = the first site's
// layer 0), shaded from white (the table's minimum) to dark blue (its maximum), value printed in
// each cell; layers may have different head counts (pruned models). Throws attnkit::Error for an
// empty table.
std::string head_heatmap_svg(const analysis::HeadTable& values, const std::string& title,
                             const std::vector<analysis::SiteRows>& sites = {});

// Metric against the fraction of heads pruned, one series per profile (named by its order); the
// random orders of a unit with a band (analysis::RandomBand with steps) as three series instead:
// their mean and the 95% t interval's ends.
LinePlot pruning_profile_plot(const std::vector<analysis::PruningProfile>& profiles,
                              const std::string& metric_name,
                              const std::vector<analysis::RandomBand>& bands = {});

// Metric over training steps for each checkpoint of a run: one series per pruned fraction.
LinePlot profile_over_steps_plot(const std::vector<int64_t>& steps,
                                 const std::vector<analysis::PruningProfile>& profiles,
                                 const std::string& metric_name);

// For a model with several attention sites (an encoder-decoder): per (layer, site) the metric when
// only the best head of that layer is kept at that site (Michel et al.'s Table 3, from
// ablation.all_but_one), and the heads pruned per site at each step of the importance-order
// profile (their Figure 6). Throw attnkit::Error for a model with one site (or no such profile).
Table one_head_per_layer_table(const analysis::HeadsAnalysis& analysis);
Table pruned_by_site_table(const analysis::HeadsAnalysis& analysis);

// Per step of the importance-order profile of heads (groups = false) or of key/value groups: the
// metric, the items' metric change from the unpruned model with its paired bootstrap interval and
// as a relative change, the random orders' mean [t interval], importance - random [interval] and
// its verdict (analysis::ProfileStatistics, RandomBand). Throws attnkit::Error without such a
// profile with statistics.
Table profile_statistics_table(const analysis::HeadsAnalysis& analysis, bool groups);

// The section (id "heads"), with figures rendered (the profile needs gnuplot); a model with
// several sites also gets the two tables above; profiles with per-item statistics their
// profile_statistics_table, and a language model the perplexity budget (headline and the heads kept
// per layer).
Section heads_section(const analysis::HeadsAnalysis& analysis, int order = 60);

// The output folder of `attnkit analyze heads`, created if need be. With a model: heads.json
// (analysis::to_json), heads_importance.svg, heads_profile.svg and section.json; with a run:
// heads_importance_stepN.svg per checkpoint, heads_over_training.json and
// heads_profile_over_training.svg (the importance-order profile per fraction over steps). Files
// are written atomically; returns what was written, in order (the cross-data correlation is
// listed as "(cross-data correlation in heads.json)").
std::vector<std::string> write_heads_outputs(const analysis::HeadsExperiment& experiment,
                                             const std::string& directory);

// A table as text cells: head_row_labels rows, one column per head (blank where a layer has fewer).
Table head_table(const analysis::HeadTable& values, const std::string& caption, int precision = 3,
                 const std::vector<analysis::SiteRows>& sites = {});

}  // namespace attnkit::report
