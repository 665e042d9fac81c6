// The LRA byte-level text tasks (lra-text, lra-retrieval) on fortune files: the files read by the
// tasks, the two-tower head (shared weights, each side encoded alone, checkpoints), a tiny
// learning test and the one-line errors. The data itself: tests/data/lra_text_test.cpp.
#include "attnkit/data/lra_text.h"
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/layers/feed_forward.h"
#include "attnkit/models/task_model.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "data/fortune_files.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace attnkit::train {
namespace {

namespace fs = std::filesystem;
using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
using attnkit::testing::small_options;
using attnkit::testing::write_bytes;
using attnkit::testing::write_fortunes;

TEST(LraText, FilesRoundTripAndTasksRead) {
  const auto data = write_fortunes("lra_text", {{"alpha", 150}, {"beta", 150}});
  const auto out = data / "out";
  auto options = small_options(data, {"alpha", "beta"});
  const auto files = data::write_lra_text(options, out.string());
  const auto back = data::read_lra_text_file(files.train);
  const auto built = data::build_lra_text(options);
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
  const auto rfiles = data::write_lra_retrieval(options, out.string());
  const auto pairs = data::read_lra_retrieval_file(rfiles.val);
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
  data::LraTextOptions options;
  options.categories = {"ay", "be"};
  options.fortunes_dir = dir.string();
  options.min_bytes = 60;
  options.max_bytes = 120;
  options.stride = 2;
  options.seed = 1;
  const auto out = dir / "out";
  data::write_lra_text(options, out.string());
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
  auto error = error_of([&] { data::build_lra_text(options); });
  EXPECT_NE(error.find("no such fortune file (category 'missing'; Debian package `fortunes`)"), std::string::npos)
      << error;
  options.categories = {"alpha"};
  EXPECT_NE(error_of([&] { data::build_lra_text(options); }).find("need at least 2 categories"), std::string::npos);
  options.categories = {"alpha", "alpha"};
  EXPECT_NE(error_of([&] { data::build_lra_text(options); }).find("named twice"), std::string::npos);
  options = small_options(dir, {"alpha", "beta"});
  options.min_bytes = 1000;
  options.max_bytes = 10;
  EXPECT_NE(error_of([&] { data::build_lra_text(options); }).find("1 <= min (1000) <= max (10)"), std::string::npos);
  options = small_options(dir, {"alpha", "beta"});
  options.val_fraction = 0.6;
  options.test_fraction = 0.5;
  EXPECT_NE(error_of([&] { data::build_lra_text(options); }).find("fractions"), std::string::npos);
  // Too little text for a passage in some split.
  write_bytes(dir / "beta", "<beta-0> short\n%\n<beta-1> short\n%\n");
  options = small_options(dir, {"alpha", "beta"});
  error = error_of([&] { data::build_lra_text(options); });
  EXPECT_NE(error.find("has no"), std::string::npos) << error;
  for (const auto& e : {error}) EXPECT_EQ(e.find('\n'), std::string::npos);

  const auto bad = dir / "bad_train.tsv";
  write_bytes(bad, "alpha\tok\nno tab here\n");
  error = error_of([&] { data::read_lra_text_file(bad.string()); });
  EXPECT_NE(error.find("bad_train.tsv:2: expected category<TAB>text"), std::string::npos) << error;
  write_bytes(bad, "alpha\tbad \\q escape\n");
  error = error_of([&] { data::read_lra_text_file(bad.string()); });
  EXPECT_NE(error.find("bad_train.tsv:1: bad escape"), std::string::npos) << error;
  write_bytes(bad, "2\ta\tb\n");
  error = error_of([&] { data::read_lra_retrieval_file(bad.string()); });
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

}  // namespace
}  // namespace attnkit::train
