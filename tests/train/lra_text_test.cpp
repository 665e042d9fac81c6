// The LRA byte-level text tasks (lra-text, lra-retrieval) on fortune files: balanced labels, splits
// by fortune, passage bounds, the two-tower head (shared weights, each side encoded alone,
// checkpoints), a tiny learning test and the one-line errors.
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/models/task_model.h"
#include "attnkit/train/lra_text.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace attnkit::train {
namespace {

namespace fs = std::filesystem;
using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;

// Fortune files of `counts` fortunes per category; fortune i of category c reads "<c-i> " then
// filler words of the category (about `bytes` bytes), so every fortune names itself.
fs::path write_fortunes(const std::string& area, const std::map<std::string, int>& counts, int bytes = 150,
                        const std::string& filler = "") {
  const auto dir = scratch_directory(area);
  for (const auto& [category, count] : counts) {
    std::string content;
    for (int i = 0; i < count; ++i) {
      std::string text = "<" + category + "-" + std::to_string(i) + ">";
      const std::string word = filler.empty() ? " " + category + " words\tand\\lines" : filler;
      while (static_cast<int>(text.size()) < bytes) text += (text.size() % 60 < 10 ? "\n" : "") + word;
      content += text + "\n%\n";
    }
    write_bytes(dir / category, content);
  }
  return dir;
}

LraTextOptions small_options(const fs::path& dir, std::vector<std::string> categories) {
  LraTextOptions o;
  o.categories = std::move(categories);
  o.fortunes_dir = dir.string();
  o.min_bytes = 400;
  o.max_bytes = 900;
  o.val_fraction = 0.15;
  o.test_fraction = 0.15;
  o.seed = 3;
  return o;
}

// The fortunes a passage holds completely (tags are cut when the passage is).
std::set<std::string> tags_of(const std::string& text) {
  static const std::regex tag("<([a-z]+-[0-9]+)>");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), tag); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

TEST(LraText, SplitsAreBalancedDisjointByFortuneAndWithinBounds) {
  // Unequal categories: the smallest decides each split's count per category.
  const auto dir = write_fortunes("lra_text", {{"alpha", 300}, {"beta", 200}, {"gamma", 120}});
  const auto options = small_options(dir, {"alpha", "beta", "gamma"});
  const LraTextSplits splits = build_lra_text(options);
  std::set<std::string> seen[3];
  const std::vector<TextPassage>* parts[] = {&splits.train, &splits.val, &splits.test};
  for (int s = 0; s < 3; ++s) {
    std::map<int64_t, size_t> per_label;
    for (const auto& p : *parts[s]) {
      ++per_label[p.label];
      EXPECT_GE(p.text.size(), 400u);
      EXPECT_LE(p.text.size(), 900u);
      const auto tags = tags_of(p.text);
      ASSERT_FALSE(tags.empty());
      for (const auto& t : tags) {
        // The label is the category of every fortune in the passage.
        EXPECT_EQ(t.substr(0, t.find('-')), splits.categories[static_cast<size_t>(p.label)]);
        seen[s].insert(t);
        // Each fortune is in the split its hash names.
      }
    }
    ASSERT_EQ(per_label.size(), 3u) << "split " << s;
    for (const auto& [label, count] : per_label) EXPECT_EQ(count, per_label.begin()->second) << "split " << s;
  }
  EXPECT_GT(splits.train.size(), 3 * splits.val.size());
  for (int a = 0; a < 3; ++a)
    for (int b = a + 1; b < 3; ++b)
      for (const auto& t : seen[a]) EXPECT_EQ(seen[b].count(t), 0u) << t << " in splits " << a << " and " << b;
  // Deterministic by seed.
  EXPECT_EQ(build_lra_text(options).train.front().text, splits.train.front().text);
}

TEST(LraText, RetrievalPairsAreBalancedAndPositivesShareNoFortune) {
  const auto dir = write_fortunes("lra_text", {{"alpha", 200}, {"beta", 200}, {"gamma", 200}});
  const auto splits = build_lra_text(small_options(dir, {"alpha", "beta", "gamma"}));
  const auto pairs = make_retrieval_pairs(splits.train, 5);
  ASSERT_GT(pairs.size(), 20u);
  size_t positives = 0;
  for (const auto& p : pairs) {
    const auto left = tags_of(p.left), right = tags_of(p.right);
    ASSERT_FALSE(left.empty());
    ASSERT_FALSE(right.empty());
    const bool same = left.begin()->substr(0, 2) == right.begin()->substr(0, 2);
    EXPECT_EQ(same, p.label == 1);
    for (const auto& t : left) EXPECT_EQ(right.count(t), 0u) << "pair shares fortune " << t;
    positives += static_cast<size_t>(p.label);
  }
  EXPECT_EQ(2 * positives, pairs.size());
}

TEST(LraText, FilesRoundTripAndTasksRead) {
  const auto data = write_fortunes("lra_text", {{"alpha", 150}, {"beta", 150}});
  const auto out = data / "out";
  auto options = small_options(data, {"alpha", "beta"});
  const auto files = write_lra_text(options, out.string());
  const auto back = read_lra_text_file(files.train);
  const auto built = build_lra_text(options);
  ASSERT_EQ(back.texts.size(), built.train.size());
  EXPECT_EQ(back.texts[0], built.train[0].text);  // tabs, newlines, backslashes survive
  EXPECT_NE(back.texts[0].find('\t'), std::string::npos);
  EXPECT_NE(back.texts[0].find('\n'), std::string::npos);
  EXPECT_EQ(files.train_count, built.train.size());

  RunConfig config;
  config.task.name = "lra-text";
  config.task.data = out.string();
  config.task.batch_size = 4;
  config.task.truncate = 4096;
  config.model.hidden = 16;
  config.model.layers = 1;
  config.model.heads = 2;
  config.model.pooling = "mean";
  config.trainer.quiet = true;
  auto task = make_task(config);
  EXPECT_EQ(task_model(*task)->config().vocab_size, 257);
  EXPECT_LE(task_model(*task)->config().max_positions, 4096);
  EXPECT_TRUE(std::isfinite(task->train_loss(0, 0, 1).loss.item<double>()));
  EXPECT_GT(task->evaluate().at("loss"), 0);

  options.min_bytes = 300;  // pairs of two passages
  const auto rfiles = write_lra_retrieval(options, out.string());
  const auto pairs = read_lra_retrieval_file(rfiles.val);
  ASSERT_FALSE(pairs.empty());
  config.task.name = "lra-retrieval";
  task = make_task(config);
  EXPECT_EQ(task_model(*task)->heads().pair_labels, 2);
  EXPECT_TRUE(std::isfinite(task->train_loss(0, 0, 1).loss.item<double>()));
  EXPECT_GT(task->evaluate().at("loss"), 0);
}

models::TaskModel pair_model() {
  models::TransformerConfig c;
  c.vocab_size = 257;
  c.hidden = 16;
  c.layers = 1;
  c.heads = 2;
  c.intermediate = 32;
  c.max_positions = 64;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  models::HeadsConfig heads;
  heads.pair_labels = 2;
  heads.sequence_pooling = models::Pooling::Mean;
  heads.classifier_dropout = 0.0;
  torch::manual_seed(7);
  models::TaskModel model(c, heads);
  model->eval();
  return model;
}

models::TaskInputs batch(const std::vector<std::vector<int64_t>>& rows, int64_t pad = 256) {
  size_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  auto ids = torch::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, pad, at::kLong);
  auto mask = torch::zeros_like(ids);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < rows[i].size(); ++j) {
      ids[i][j] = rows[i][j];
      mask[i][j] = 1;
    }
  models::TaskInputs in;
  in.input_ids = ids;
  in.attention_mask = mask;
  return in;
}

TEST(LraRetrievalModel, TowersShareWeightsAndEncodeEachSideAlone) {
  auto model = pair_model();
  torch::NoGradGuard no_grad;
  const auto left = batch({{1, 2, 3, 4, 5}, {9, 8, 7}});
  const auto right1 = batch({{10, 11, 12}, {40, 41, 42, 43, 44, 45}});
  const auto right2 = batch({{200, 201}, {50, 51, 52, 53, 54, 55, 56, 57, 58, 59}});
  const auto u = model->encode(left);
  ASSERT_EQ(u.sizes(), (std::vector<int64_t>{2, 16}));
  // The left side's pooled vectors do not move when the right side changes.
  const auto logits1 = model->pair_logits(left, right1);
  const auto u_after = model->encode(left);
  EXPECT_TRUE(torch::allclose(u, u_after));
  const auto logits2 = model->pair_logits(left, right2);
  EXPECT_FALSE(torch::allclose(logits1, logits2));  // the right side matters
  // One encoder for both towers: the logits are the MLP over [u, v, u*v, u-v] with v = encode(right).
  const auto v = model->encode(right1);
  auto features = torch::cat({u, v, u * v, u - v}, -1);
  auto expected = model->pair_classifier->forward(
      layers::apply_activation(model->pair_hidden->forward(features), model->config().activation));
  EXPECT_TRUE(torch::allclose(logits1, expected, 1e-5, 1e-6));
  // A row's vector does not depend on the other rows of its batch (padding masked).
  const auto alone = model->encode(batch({{9, 8, 7}}));
  EXPECT_TRUE(torch::allclose(alone[0], u[1], 1e-5, 1e-6));
  // Only one transformer in the parameters.
  int transformers = 0;
  for (const auto& named : model->named_children()) transformers += named.key() == "transformer";
  EXPECT_EQ(transformers, 1);
}

TEST(LraRetrievalModel, CheckpointSavesAndReloadsThePairHead) {
  auto model = pair_model();
  const auto dir = scratch_directory("lra_text") / "pair_model";
  io::save_attnkit_model(model, dir.string());
  auto loaded = io::load_model(dir.string());
  ASSERT_TRUE(loaded.task);
  EXPECT_EQ(loaded.heads.pair_labels, 2);
  loaded.task->eval();
  torch::NoGradGuard no_grad;
  const auto left = batch({{1, 2, 3}}), right = batch({{4, 5, 6, 7}});
  EXPECT_TRUE(torch::allclose(model->pair_logits(left, right), loaded.task->pair_logits(left, right)));
  // A heads config without pair_labels (older checkpoints) still reads, as 0.
  models::HeadsConfig plain;
  nlohmann::json j = plain;
  EXPECT_FALSE(j.contains("pair_labels"));
  EXPECT_EQ(j.get<models::HeadsConfig>().pair_labels, 0);
}

TEST(LraText, TinyModelLearnsAnEasyVariant) {
  // Two categories told apart by their bytes ("aaaa..." vs "bbbb..."), passages of 60-120 bytes:
  // one layer with mean pooling separates them in a few dozen steps.
  const auto dir = scratch_directory("lra_text");
  for (const auto& [category, letter] : {std::pair<std::string, char>{"ay", 'a'}, {"be", 'b'}}) {
    std::string content;
    for (int i = 0; i < 400; ++i) {
      std::string text = "x" + std::to_string(i) + " ";
      for (int k = 0; k < 20; ++k) text += (k % 3 == 0 ? std::string(1, letter) : "c");
      content += text + "\n%\n";
    }
    write_bytes(dir / category, content);
  }
  LraTextOptions options;
  options.categories = {"ay", "be"};
  options.fortunes_dir = dir.string();
  options.min_bytes = 60;
  options.max_bytes = 120;
  options.stride = 2;
  options.seed = 1;
  const auto out = dir / "out";
  write_lra_text(options, out.string());
  RunConfig config;
  config.task.name = "lra-text";
  config.task.data = out.string();
  config.task.batch_size = 16;
  config.task.eval_examples = 0;
  config.model.hidden = 16;
  config.model.layers = 1;
  config.model.heads = 2;
  config.model.dropout = 0.0;
  config.model.pooling = "mean";
  config.trainer.seed = 1;
  config.trainer.steps = 60;
  config.trainer.quiet = true;
  config.trainer.log_every = 1000;
  config.trainer.optimizer.learning_rate = 3e-3;
  config.trainer.schedule.warmup_steps = 5;
  auto task = make_task(config);
  Trainer trainer(*task, config.trainer);
  const auto before = trainer.evaluate();
  const auto result = trainer.train();
  const double after = result.last_metrics.at("accuracy");
  EXPECT_GT(after, 0.9) << "accuracy " << before.at("accuracy") << " -> " << after;
  EXPECT_LT(result.last_metrics.at("loss"), before.at("loss") * 0.5);
}

TEST(LraText, BadInputsAreOneLineErrors) {
  const auto dir = write_fortunes("lra_text", {{"alpha", 50}});
  auto options = small_options(dir, {"alpha", "missing"});
  auto error = error_of([&] { build_lra_text(options); });
  EXPECT_NE(error.find("no such fortune file (category 'missing'; Debian package `fortunes`)"), std::string::npos)
      << error;
  options.categories = {"alpha"};
  EXPECT_NE(error_of([&] { build_lra_text(options); }).find("need at least 2 categories"), std::string::npos);
  options.categories = {"alpha", "alpha"};
  EXPECT_NE(error_of([&] { build_lra_text(options); }).find("named twice"), std::string::npos);
  options = small_options(dir, {"alpha", "beta"});
  options.min_bytes = 1000;
  options.max_bytes = 10;
  EXPECT_NE(error_of([&] { build_lra_text(options); }).find("1 <= min (1000) <= max (10)"), std::string::npos);
  options = small_options(dir, {"alpha", "beta"});
  options.val_fraction = 0.6;
  options.test_fraction = 0.5;
  EXPECT_NE(error_of([&] { build_lra_text(options); }).find("fractions"), std::string::npos);
  // Too little text for a passage in some split.
  write_bytes(dir / "beta", "<beta-0> short\n%\n<beta-1> short\n%\n");
  options = small_options(dir, {"alpha", "beta"});
  error = error_of([&] { build_lra_text(options); });
  EXPECT_NE(error.find("has no"), std::string::npos) << error;
  for (const auto& e : {error}) EXPECT_EQ(e.find('\n'), std::string::npos);

  const auto bad = dir / "bad_train.tsv";
  write_bytes(bad, "alpha\tok\nno tab here\n");
  error = error_of([&] { read_lra_text_file(bad.string()); });
  EXPECT_NE(error.find("bad_train.tsv:2: expected category<TAB>text"), std::string::npos) << error;
  write_bytes(bad, "alpha\tbad \\q escape\n");
  error = error_of([&] { read_lra_text_file(bad.string()); });
  EXPECT_NE(error.find("bad_train.tsv:1: bad escape"), std::string::npos) << error;
  write_bytes(bad, "2\ta\tb\n");
  error = error_of([&] { read_lra_retrieval_file(bad.string()); });
  EXPECT_NE(error.find("bad_train.tsv:1: expected label (0 or 1)"), std::string::npos) << error;

  RunConfig config;
  config.task.name = "lra-text";
  config.task.data = (dir / "nowhere").string();
  error = error_of([&] { make_task(config); });
  EXPECT_NE(error.find("no such file or directory (write it with `attnkit data lra-text --out DIR`)"),
            std::string::npos)
      << error;
  config.task.name = "lra-retrieval";
  config.task.data = dir.string();  // a directory without retrieval_train.tsv
  error = error_of([&] { make_task(config); });
  EXPECT_NE(error.find("retrieval_train.tsv: cannot open"), std::string::npos) << error;
}

TEST(LraText, DebianFortunesGiveBalancedSplits) {
  const std::string fortunes = "/usr/share/games/fortunes";
  for (const auto& c : default_text_categories())
    if (!fs::exists(fs::path(fortunes) / c)) GTEST_SKIP() << "Debian package fortunes is not installed";
  const auto splits = build_lra_text(LraTextOptions{});
  for (const auto* part : {&splits.train, &splits.val, &splits.test}) {
    std::map<int64_t, size_t> per_label;
    for (const auto& p : *part) {
      ++per_label[p.label];
      ASSERT_GE(p.text.size(), 1024u);
      ASSERT_LE(p.text.size(), 4096u);
    }
    ASSERT_EQ(per_label.size(), 4u);
    for (const auto& [label, count] : per_label) EXPECT_EQ(count, per_label.begin()->second);
  }
}

}  // namespace
}  // namespace attnkit::train
