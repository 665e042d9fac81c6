#include "attnkit/report/head_plots.h"

#include "attnkit/error.h"
#include "attnkit/io/atomic_file.h"
#include "attnkit/report/html.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace attnkit::report {
namespace {

std::string percent(double fraction) { return fmt::format("{:.0f}%", 100 * fraction); }

}  // namespace

std::vector<std::string> head_row_labels(const std::vector<analysis::SiteRows>& sites, size_t rows) {
  std::vector<std::string> labels;
  for (size_t r = 0; r < rows; ++r) labels.push_back(fmt::format("L{}", r));
  if (sites.size() < 2) return labels;
  for (const auto& site : sites)
    for (int64_t l = 0; l < site.layers; ++l)
      if (site.first_row + l >= 0 && size_t(site.first_row + l) < rows)
        labels[site.first_row + l] = fmt::format("{} L{}", site.name, l);
  return labels;
}

std::string head_heatmap_svg(const analysis::HeadTable& values, const std::string& title,
                             const std::vector<analysis::SiteRows>& sites) {
  const auto labels = head_row_labels(sites, values.size());
  size_t label_width = 0;
  for (const auto& label : labels) label_width = std::max(label_width, label.size());
  size_t columns = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& row : values) {
    columns = std::max(columns, row.size());
    for (double v : row) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (values.empty() || columns == 0) throw Error("head heat map: no heads");
  const int cell = 44, left = std::max(56, 12 + 7 * int(label_width)), top = 48, bottom = 36;
  const int width = left + int(columns) * cell + 16;
  const int height = top + int(values.size()) * cell + bottom;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      width, height);
  svg += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"14\">{}</text>\n", left, escape_xml(title));
  for (size_t h = 0; h < columns; ++h)
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">h{}</text>\n",
                       left + int(h) * cell + cell / 2, top - 6, h);
  for (size_t l = 0; l < values.size(); ++l) {
    const int y = top + int(l) * cell;
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 6,
                       y + cell / 2 + 4, escape_xml(labels[l]));
    for (size_t h = 0; h < values[l].size(); ++h) {
      const double v = values[l][h];
      const double t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
      // White -> dark blue.
      const int r = int(std::lround(255 - t * (255 - 8))), g = int(std::lround(255 - t * (255 - 48))),
                b = int(std::lround(255 - t * (255 - 107)));
      const int x = left + int(h) * cell;
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"rgb({},{},{})\" stroke=\"#888\"/>\n",
          x, y, cell, cell, r, g, b);
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\">{:.2f}</text>\n",
                         x + cell / 2, y + cell / 2 + 4, t > 0.55 ? "white" : "black", v);
    }
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\">min {:.3g}, max {:.3g}</text>\n", left,
                     height - 12, lo, hi);
  svg += "</svg>\n";
  return svg;
}

LinePlot pruning_profile_plot(const std::vector<analysis::PruningProfile>& profiles,
                              const std::string& metric_name,
                              const std::vector<analysis::RandomBand>& bands) {
  LinePlot plot;
  plot.title = "Pruning profile: heads masked globally in steps";
  plot.x_label = "fraction of heads pruned";
  plot.y_label = metric_name;
  // A unit whose random orders have a band: its mean and mean ± sd instead of each order (a t
  // interval over a handful of orders is wide enough to leave the metric's range).
  auto band_of = [&](bool groups) -> const analysis::RandomBand* {
    for (const auto& b : bands)
      if (b.groups == groups && !b.steps.empty()) return &b;
    return nullptr;
  };
  for (const auto* band : {band_of(false), band_of(true)}) {
    if (!band) continue;
    const std::string unit = band->groups ? ", whole key/value groups (x: fraction of groups)" : "";
    Series mean, low, high;
    mean.title = fmt::format("random, mean of {} orders{}", band->seeds.size(), unit);
    low.title = fmt::format("random, mean - sd{}", band->groups ? " (groups)" : "");
    high.title = fmt::format("random, mean + sd{}", band->groups ? " (groups)" : "");
    mean.dashed = low.dashed = high.dashed = true;
    low.style = high.style = "lines";
    for (const auto& step : band->steps) {
      for (auto* s : {&mean, &low, &high}) s->x.push_back(step.fraction);
      mean.y.push_back(step.metric.mean);
      low.y.push_back(step.metric.mean - step.metric.sd);
      high.y.push_back(step.metric.mean + step.metric.sd);
    }
    for (auto* s : {&mean, &low, &high}) plot.series.push_back(std::move(*s));
  }
  for (const auto& p : profiles) {
    if (p.order == analysis::PruningOrder::Random && band_of(p.groups)) continue;
    Series s;
    s.title = fmt::format("{}{}", analysis::to_string(p.order),
                          p.exact && p.order != analysis::PruningOrder::Random ? " (exact)" : "");
    if (p.order == analysis::PruningOrder::Importance) s.title = "ascending importance" + s.title.substr(10);
    if (p.order == analysis::PruningOrder::Reverse) s.title = "descending importance" + s.title.substr(7);
    if (p.groups) s.title += ", whole key/value groups (x: fraction of groups)";
    s.dashed = p.order != analysis::PruningOrder::Importance;
    for (const auto& step : p.steps) {
      s.x.push_back(step.fraction);
      s.y.push_back(step.metric);
    }
    plot.series.push_back(std::move(s));
  }
  return plot;
}

LinePlot profile_over_steps_plot(const std::vector<int64_t>& steps,
                                 const std::vector<analysis::PruningProfile>& profiles,
                                 const std::string& metric_name) {
  if (steps.size() != profiles.size() || steps.empty())
    throw Error("profile over steps: one profile per checkpoint needed");
  LinePlot plot;
  plot.title = "Pruning profile over training (ascending importance)";
  plot.x_label = "training step";
  plot.y_label = metric_name;
  const size_t fractions = profiles.front().steps.size();
  for (size_t f = 0; f < fractions; ++f) {
    Series s;
    s.title = "pruned " + percent(profiles.front().steps[f].fraction);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (f >= profiles[i].steps.size()) continue;
      s.x.push_back(double(steps[i]));
      s.y.push_back(profiles[i].steps[f].metric);
    }
    plot.series.push_back(std::move(s));
  }
  return plot;
}

Table head_table(const analysis::HeadTable& values, const std::string& caption, int precision,
                 const std::vector<analysis::SiteRows>& sites) {
  const auto labels = head_row_labels(sites, values.size());
  Table t;
  t.caption = caption;
  size_t columns = 0;
  for (const auto& row : values) columns = std::max(columns, row.size());
  t.columns.push_back("layer");
  for (size_t h = 0; h < columns; ++h) t.columns.push_back(fmt::format("h{}", h));
  for (size_t l = 0; l < values.size(); ++l) {
    std::vector<std::string> row{labels[l]};
    for (size_t h = 0; h < columns; ++h)
      row.push_back(h < values[l].size() ? fmt::format("{:.{}f}", values[l][h], precision) : "");
    t.rows.push_back(std::move(row));
  }
  return t;
}

Table one_head_per_layer_table(const analysis::HeadsAnalysis& r) {
  if (r.sites.size() < 2) throw Error("one head per layer: needs a model with several attention sites");
  Table t;
  t.caption = fmt::format(
      "{0} when only the best head of a layer is kept at one site, every other head of the model kept "
      "(Michel et al.'s Table 3; baseline {1:.4f}); in brackets the change", r.metric_name, r.ablation.baseline);
  t.columns.push_back("layer");
  int64_t layers = 0;
  for (const auto& site : r.sites) {
    t.columns.push_back(site.name);
    layers = std::max(layers, site.layers);
  }
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<std::string> row{fmt::format("L{}", l)};
    for (const auto& site : r.sites) {
      const int64_t index = site.first_row + l;
      if (l >= site.layers || index >= int64_t(r.ablation.all_but_one.size()) ||
          r.ablation.all_but_one[index].empty()) {
        row.push_back("");
        continue;
      }
      const auto& kept = r.ablation.all_but_one[index];
      const auto best = std::max_element(kept.begin(), kept.end());
      row.push_back(fmt::format("{:.4f} ({:+.4f}, h{})", *best, *best - r.ablation.baseline, best - kept.begin()));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

Table pruned_by_site_table(const analysis::HeadsAnalysis& r) {
  const analysis::PruningProfile* profile = nullptr;
  for (const auto& p : r.profiles)
    if (p.order == analysis::PruningOrder::Importance && !p.groups && !profile) profile = &p;
  if (!profile || r.sites.size() < 2) throw Error("pruned by site: needs an importance-order profile of several sites");
  Table t;
  t.caption = fmt::format(
      "Heads pruned at each site as the global pruning (least important first) goes on, with {} "
      "(Michel et al.'s Figure 6)", r.metric_name);
  t.columns = {"pruned", r.metric_name};
  std::vector<int64_t> totals;
  for (const auto& site : r.sites) {
    int64_t total = 0;
    for (int64_t l = 0; l < site.layers; ++l)
      if (site.first_row + l < int64_t(r.importance.importance.size()))
        total += int64_t(r.importance.importance[site.first_row + l].size());
    totals.push_back(total);
    t.columns.push_back(site.name);
  }
  for (const auto& step : profile->steps) {
    std::vector<std::string> row{percent(step.fraction), fmt::format("{:.4f}", step.metric)};
    for (size_t s = 0; s < r.sites.size(); ++s)
      row.push_back(s < step.pruned_by_site.size() ? fmt::format("{} of {}", step.pruned_by_site[s], totals[s]) : "");
    t.rows.push_back(std::move(row));
  }
  return t;
}

Table profile_statistics_table(const analysis::HeadsAnalysis& r, bool groups) {
  const analysis::PruningProfile* profile = nullptr;
  const analysis::ProfileStatistics* statistics = nullptr;
  for (size_t i = 0; i < r.profiles.size() && i < r.statistics.size(); ++i)
    if (r.profiles[i].order == analysis::PruningOrder::Importance && r.profiles[i].groups == groups &&
        !r.statistics[i].vs_baseline.empty() && !profile) {
      profile = &r.profiles[i];
      statistics = &r.statistics[i];
    }
  if (!profile) throw Error("profile statistics: no importance-order profile with per-item statistics");
  const analysis::RandomBand* band = nullptr;
  for (const auto& b : r.random_bands)
    if (b.groups == groups) band = &b;
  const auto& first = statistics->vs_baseline.front().bootstrap;
  const std::string metric = metrics::metric_name(first.metric);
  Table t;
  t.caption = fmt::format(
      "Pruning {} least important first: {} change from the unpruned model with its 95% paired "
      "bootstrap interval ({} resamples of the {} evaluation items, seed {}), the random orders' "
      "{} (mean ± sd over {} orders) and importance against random (two-stage "
      "bootstrap over items and orders)",
      groups ? "whole key/value groups" : "heads", metric, first.samples, first.items, first.seed,
      r.metric_name, band ? band->seeds.size() : 0);
  t.columns = {"pruned", r.metric_name, metric + " change", "relative", "random " + r.metric_name,
               "importance - random (" + metric + ")", "verdict"};
  // A language model's band of perplexities beside its metric's.
  const bool perplexity = band && !band->steps.empty() && band->steps.front().perplexity;
  if (perplexity) t.columns.insert(t.columns.begin() + 5, "random perplexity");
  for (const auto& v : statistics->vs_baseline) {
    const auto& step = profile->steps[v.step];
    const auto& d = v.bootstrap.difference;
    std::vector<std::string> row{
        fmt::format("{} ({})", step.pruned, percent(step.fraction)), fmt::format("{:.4f}", step.metric),
        fmt::format("{:+.4f} [{:+.4f}, {:+.4f}]", d.score, d.interval.low, d.interval.high),
        fmt::format("{:+.1f}% [{:+.1f}%, {:+.1f}%]", 100 * v.relative.score, 100 * v.relative.interval.low,
                    100 * v.relative.interval.high),
        "", "", ""};
    if (band && v.step < band->steps.size()) {
      const auto& m = band->steps[v.step].metric;
      row[4] = fmt::format("{:.4f} ± {:.4f}", m.mean, m.sd);
    }
    if (perplexity) {
      const auto& q = v.step < band->steps.size() ? band->steps[v.step].perplexity : std::nullopt;
      row.insert(row.begin() + 5, q ? fmt::format("{:.2f} ± {:.2f}", q->mean, q->sd) : "");
    }
    if (band)
      for (const auto& c : band->importance_vs_random)
        if (c.step == v.step) {
          row[row.size() - 2] = fmt::format("{:+.4f} [{:+.4f}, {:+.4f}]", c.difference.score,
                                            c.difference.interval.low, c.difference.interval.high);
          row.back() = c.verdict.text;
        }
    t.rows.push_back(std::move(row));
  }
  return t;
}

Section heads_section(const analysis::HeadsAnalysis& r, int order) {
  Section s;
  s.order = order;
  s.id = "heads";
  s.title = "Attention heads: importance, ablation and pruning (Michel et al. 2019)";
  s.headlines.push_back({"baseline " + r.metric_name, fmt::format("{:.4f}", r.ablation.baseline), {}});
  if (r.baseline_loss)
    s.headlines.push_back({"baseline loss (perplexity)",
                           fmt::format("{:.4f} ({:.2f})", *r.baseline_loss, std::exp(*r.baseline_loss)),
                           {}});
  for (const auto& p : r.profiles) {
    if (p.order != analysis::PruningOrder::Importance || p.groups) continue;
    for (const auto& step : p.steps)
      if (std::abs(step.fraction - 0.5) < 0.06) {
        s.headlines.push_back({fmt::format("{} with {} of heads pruned", r.metric_name,
                                           percent(step.fraction)),
                               fmt::format("{:.4f}", step.metric), {}});
        break;
      }
  }
  for (size_t i = 0; i < r.profiles.size() && i < r.statistics.size(); ++i) {
    const auto& p = r.profiles[i];
    if (p.order != analysis::PruningOrder::Importance || !r.statistics[i].budget) continue;
    const auto& b = *r.statistics[i].budget;
    const auto& first = r.statistics[i].vs_baseline.front();
    const char* unit = p.groups ? "key/value groups" : "heads";
    s.headlines.push_back(
        {fmt::format("{} pruned at <= {:.0f}% perplexity increase (importance order)", unit, 100 * b.budget),
         b.step == 0
             ? fmt::format("0 (the first step, {} pruned, is {:+.1f}% [{:+.1f}%, {:+.1f}%])",
                           p.steps[first.step].pruned, 100 * first.relative.score,
                           100 * first.relative.interval.low, 100 * first.relative.interval.high)
             : fmt::format("{} ({:+.1f}% [{:+.1f}%, {:+.1f}%]); {} with the interval's upper end within",
                           b.pruned, 100 * b.increase, 100 * b.interval.low, 100 * b.interval.high,
                           b.pruned_upper),
         {}});
  }
  s.blocks.push_back({fmt::format(
                          "Model {}. Importance I_h = sum over tokens of |ctx_h . dL/dctx_h| "
                          "(the authors' formulation), per-layer L2-normalised. Single-head "
                          "ablation: the metric with that head alone masked; all-but-one: the "
                          "metric with only that head kept in its layer.",
                          r.model),
                      {}, {}});
  s.blocks.push_back({{}, {}, Figure{"Head importance (layers x heads)",
                                     head_heatmap_svg(r.importance.importance, "Head importance", r.sites)}});
  s.blocks.push_back({{}, head_table(r.importance.importance, "Head importance", 3, r.sites), {}});
  s.blocks.push_back({{}, head_table(r.ablation.single,
                                     fmt::format("{} with the head alone masked (baseline {:.4f})",
                                                 r.metric_name, r.ablation.baseline), 4, r.sites), {}});
  s.blocks.push_back({{}, head_table(r.ablation.all_but_one,
                                     fmt::format("{} with only the head kept in its layer", r.metric_name),
                                     4, r.sites), {}});
  if (!r.profiles.empty())
    s.blocks.push_back({{}, {}, Figure{"Pruning profile with random and descending-importance baselines",
                                       render_svg(pruning_profile_plot(r.profiles, r.metric_name, r.random_bands))}});
  for (bool groups : {false, true}) {
    bool has = false;
    for (size_t i = 0; i < r.profiles.size() && i < r.statistics.size(); ++i)
      has = has || (r.profiles[i].order == analysis::PruningOrder::Importance && r.profiles[i].groups == groups &&
                    !r.statistics[i].vs_baseline.empty());
    if (has) s.blocks.push_back({{}, profile_statistics_table(r, groups), {}});
  }
  for (size_t i = 0; i < r.profiles.size() && i < r.statistics.size(); ++i) {
    const auto& p = r.profiles[i];
    if (p.order != analysis::PruningOrder::Importance || !r.statistics[i].budget ||
        r.statistics[i].budget->step == 0)
      continue;
    const auto& b = *r.statistics[i].budget;
    Table t;
    t.caption = fmt::format("Heads kept per layer at the last step within {:.0f}% perplexity increase "
                            "({} {} pruned, importance order)",
                            100 * b.budget, b.pruned, p.groups ? "key/value groups" : "heads");
    const auto labels = head_row_labels(r.sites, b.kept_per_layer.size());
    t.columns = {""};
    t.rows = {{"heads kept"}};
    for (size_t l = 0; l < b.kept_per_layer.size(); ++l) {
      t.columns.push_back(labels[l]);
      t.rows.front().push_back(std::to_string(b.kept_per_layer[l]));
    }
    s.blocks.push_back({{}, t, {}});
  }
  if (r.sites.size() >= 2) {
    if (!r.ablation.all_but_one.empty()) s.blocks.push_back({{}, one_head_per_layer_table(r), {}});
    const bool has_importance_profile = std::any_of(r.profiles.begin(), r.profiles.end(), [](const auto& p) {
      return p.order == analysis::PruningOrder::Importance;
    });
    if (has_importance_profile) s.blocks.push_back({{}, pruned_by_site_table(r), {}});
  }
  return s;
}

std::vector<std::string> write_heads_outputs(const analysis::HeadsExperiment& e,
                                             const std::string& directory) {
  namespace fs = std::filesystem;
  const fs::path out(directory);
  fs::create_directories(out);
  std::vector<std::string> written;
  auto write = [&](const std::string& name, const std::string& content) {
    io::write_file_atomically((out / name).string(), content);
    written.push_back(name);
  };
  if (!e.run.empty()) {
    std::vector<int64_t> steps;
    std::vector<analysis::PruningProfile> profiles;
    for (const auto& c : e.checkpoints) {
      steps.push_back(c.step);
      profiles.push_back(c.analysis.profiles.front());
      write(fmt::format("heads_importance_step{}.svg", c.step),
            head_heatmap_svg(c.analysis.importance.importance,
                             fmt::format("Head importance at step {}", c.step), c.analysis.sites));
    }
    write("heads_over_training.json", analysis::to_json(e).dump(2) + "\n");
    const std::string metric =
        e.checkpoints.empty() ? "accuracy" : e.checkpoints.front().analysis.metric_name;
    write_svg(profile_over_steps_plot(steps, profiles, metric),
              (out / "heads_profile_over_training.svg").string());
    written.push_back("heads_profile_over_training.svg");
    return written;
  }
  if (e.cross_data) written.push_back("(cross-data correlation in heads.json)");
  write("heads.json", analysis::to_json(e).dump(2) + "\n");
  write("heads_importance.svg",
        head_heatmap_svg(e.analysis.importance.importance, "Head importance", e.analysis.sites));
  write_svg(pruning_profile_plot(e.analysis.profiles, e.analysis.metric_name, e.analysis.random_bands),
            (out / "heads_profile.svg").string());
  written.push_back("heads_profile.svg");
  write_section(heads_section(e.analysis), out);
  written.push_back("section.json");
  return written;
}

}  // namespace attnkit::report
