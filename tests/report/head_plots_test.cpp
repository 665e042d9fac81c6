// report/head_plots: the per-site tables of an encoder-decoder's head analysis (Michel et al.'s
// Table 3: one head kept per layer and site; Figure 6: heads pruned per site as pruning goes on).
#include "attnkit/report/head_plots.h"

#include "attnkit/error.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace {

using namespace attnkit::analysis;
using namespace attnkit::report;

// Three sites of two layers; encoder.self has 2 heads per layer, the others 3.
HeadsAnalysis three_sites() {
  HeadsAnalysis r;
  r.metric_name = "bleu";
  r.sites = {{"encoder.self", 2, 0}, {"decoder.self", 2, 2}, {"decoder.cross", 2, 4}};
  r.importance.importance = {{1, 1}, {1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  r.ablation.baseline = 0.30;
  r.ablation.all_but_one = {{0.30, 0.28}, {0.10, 0.25}, {0.20, 0.31, 0.05},
                            {0.30, 0.30, 0.29}, {0.01, 0.02, 0.12}, {0.22, 0.00, 0.00}};
  PruningProfile p;
  p.order = PruningOrder::Importance;
  const auto step = [](double fraction, int64_t pruned, double metric, std::vector<int64_t> by_site) {
    PruningStep s;
    s.fraction = fraction;
    s.pruned = pruned;
    s.metric = metric;
    s.pruned_by_site = std::move(by_site);
    return s;
  };
  p.steps = {step(0.0, 0, 0.30, {0, 0, 0}), step(0.5, 8, 0.21, {3, 4, 1}), step(1.0, 10, 0.02, {2, 4, 4})};
  PruningProfile random = p;
  random.order = PruningOrder::Random;
  random.steps[1].pruned_by_site = {9, 9, 9};  // must not be the one shown
  r.profiles = {random, p};
  return r;
}

TEST(HeadPlots, OneHeadPerLayerAndSiteKeepsTheBestHeadOfEach) {
  const Table t = one_head_per_layer_table(three_sites());
  EXPECT_EQ(t.columns, (std::vector<std::string>{"layer", "encoder.self", "decoder.self", "decoder.cross"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"L0", "0.3000 (+0.0000, h0)", "0.3100 (+0.0100, h1)",
                                                 "0.1200 (-0.1800, h2)"}));
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"L1", "0.2500 (-0.0500, h1)", "0.3000 (+0.0000, h0)",
                                                 "0.2200 (-0.0800, h0)"}));
}

TEST(HeadPlots, PrunedBySiteFollowsTheImportanceProfile) {
  const Table t = pruned_by_site_table(three_sites());
  EXPECT_EQ(t.columns, (std::vector<std::string>{"pruned", "bleu", "encoder.self", "decoder.self", "decoder.cross"}));
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"50%", "0.2100", "3 of 4", "4 of 6", "1 of 6"}));
  EXPECT_EQ(t.rows[2][4], "4 of 6");
}

TEST(HeadPlots, OneSiteHasNoPerSiteTables) {
  HeadsAnalysis r = three_sites();
  r.sites.resize(1);
  EXPECT_THROW(one_head_per_layer_table(r), attnkit::Error);
  EXPECT_THROW(pruned_by_site_table(r), attnkit::Error);
}

}  // namespace
