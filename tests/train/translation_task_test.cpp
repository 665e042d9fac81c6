// The translation task: an encoder-decoder trained on a rule-based toy language pair learns it
// (sacreBLEU of greedy and beam decodes on held-out sentences), the same seed gives the same
// model, and bad settings and data are one-line errors before anything is trained.
#include "attnkit/error.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;

// Source: 2 or 3 "adjective noun" phrases; target: each phrase's words translated by a fixed
// dictionary and swapped ("red cat big dog" -> "gato rojo perro grande"), so the decoder must
// reorder, not copy position by position. 5 x 5 phrases: 15,625 three-phrase sentences, of which
// training sees at most 600; validation sentences are drawn apart and never in training.
struct ToyPair {
  std::string source, target;
};

std::vector<ToyPair> toy_pairs(std::mt19937& rng, int count, std::set<std::string>& seen) {
  const std::vector<std::string> adjectives{"red", "big", "old", "small", "blue"};
  const std::vector<std::string> nouns{"cat", "dog", "bird", "fish", "horse"};
  const std::vector<std::string> adjetivos{"rojo", "grande", "viejo", "chico", "azul"};
  const std::vector<std::string> nombres{"gato", "perro", "ave", "pez", "caballo"};
  std::vector<ToyPair> out;
  while (static_cast<int>(out.size()) < count) {
    ToyPair p;
    const unsigned phrases = 2 + rng() % 2;
    for (unsigned k = 0; k < phrases; ++k) {
      const unsigned a = rng() % 5, n = rng() % 5;
      p.source += (k ? " " : "") + adjectives[a] + " " + nouns[n];
      p.target += (k ? " " : "") + nombres[n] + " " + adjetivos[a];
    }
    if (seen.insert(p.source).second) out.push_back(p);
  }
  return out;
}

std::string tsv(const std::vector<ToyPair>& pairs) {
  std::string out;
  for (const auto& p : pairs) out += p.source + "\t" + p.target + "\n";
  return out;
}

RunConfig toy_config(const std::filesystem::path& dir, int64_t steps) {
  std::mt19937 rng(11);
  std::set<std::string> seen;
  const auto train = toy_pairs(rng, 600, seen);
  const auto val = toy_pairs(rng, 40, seen);
  write_bytes(dir / "toy_train.tsv", tsv(train));
  write_bytes(dir / "toy_val.tsv", tsv(val));
  write_bytes(dir / "vocab.txt",
              "[PAD]\n[UNK]\n[CLS]\n[SEP]\nred\nbig\nold\nsmall\nblue\ncat\ndog\nbird\nfish\nhorse\n"
              "rojo\ngrande\nviejo\nchico\nazul\ngato\nperro\nave\npez\ncaballo\n");
  RunConfig c;
  c.task.name = "translation";
  c.task.data = (dir / "toy_train.tsv").string();
  c.task.tokenizer = (dir / "vocab.txt").string();
  c.task.batch_size = 16;
  c.task.truncate = 16;
  c.task.eval_examples = 40;
  c.task.label_smoothing = 0.1;
  c.model.hidden = 32;
  c.model.layers = 2;
  c.model.heads = 2;
  c.model.dropout = 0.0;
  // Pre-LN with learned positions at lr 1e-3: BLEU 1.0 on the held-out lines by step 200 for run
  // seeds 0-5 on this data (checked with `attnkit train` on the files this test writes); at
  // lr 3e-3 seed 0 stalled at BLEU 0.44 after 500 steps while seeds 1 and 2 got there by step
  // 200; post-LN with the sinusoidal table (amplitude 1 against 0.02 token embeddings) stayed at
  // loss 1.44 (the source ignored) for 600 steps on similar data.
  c.model.pre_ln = true;
  c.model.positions = "learned";
  c.trainer.steps = steps;
  c.trainer.optimizer.learning_rate = 1e-3;
  c.trainer.schedule.warmup_steps = 20;
  c.trainer.quiet = true;
  c.trainer.log_every = 1000;
  return c;
}

TEST(TranslationTask, LearnsAToyLanguagePairWithReordering) {
  const auto dir = scratch_directory("translation_task");
  auto config = toy_config(dir, 300);
  auto task = make_task(config);
  EXPECT_EQ(task->primary_metric(), "bleu");
  EXPECT_TRUE(task->higher_is_better());
  ASSERT_NE(task->trained_model(), nullptr);
  EXPECT_EQ(task->trained_model()->shape(), models::ModelShape::EncoderDecoder);
  Trainer trainer(*task, config.trainer);
  const auto before = trainer.evaluate();
  const auto after = trainer.train().last_metrics;
  EXPECT_LT(before.at("bleu"), 0.1);
  EXPECT_GT(after.at("token_accuracy"), 0.95);
  EXPECT_GT(after.at("bleu"), 0.9);  // sacreBLEU 90 on held-out sentences, greedy decodes
  EXPECT_GT(after.at("chrf"), 0.9);
  EXPECT_LT(after.at("loss"), before.at("loss"));
}

TEST(TranslationTask, SameSeedSameModelAndBeamSearchDecodes) {
  const auto dir = scratch_directory("translation_seed");
  auto config = toy_config(dir, 12);
  auto weights = [&](const RunConfig& c) {
    auto task = make_task(c);
    Trainer trainer(*task, c.trainer);
    trainer.train();
    std::vector<at::Tensor> out;
    for (const auto& p : task->module().parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const auto a = weights(config), b = weights(config);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
  config.trainer.seed = 7;
  const auto c = weights(config);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs = differs || !at::equal(a[i], c[i]);
  EXPECT_TRUE(differs);
  // Beam search, post-LN, separate embeddings and a cross attention of another kind all build
  // and evaluate.
  config.task.beams = 3;
  config.model.pre_ln = false;
  config.model.share_embeddings = false;
  config.model.cross_attention = "linear:elu";
  auto task = make_task(config);
  Trainer trainer(*task, config.trainer);
  const auto metrics = trainer.evaluate();
  EXPECT_GE(metrics.at("bleu"), 0.0);
  EXPECT_TRUE(std::isfinite(metrics.at("loss")));
  const auto* model = dynamic_cast<models::EncoderDecoderModelImpl*>(task->trained_model().get());
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->config().encoder.norm_first);
  EXPECT_FALSE(model->config().share_embeddings);
}

TEST(TranslationTask, BadSettingsAndDataAreOneLineErrors) {
  const auto dir = scratch_directory("translation_errors");
  auto config = toy_config(dir, 1);
  write_bytes(dir / "bad_train.tsv", "red cat\tgato rojo\nred dog gato\n");
  write_bytes(dir / "bad_val.tsv", "red cat\tgato rojo\n");
  write_bytes(dir / "vocab_nosep.txt", "[PAD]\n[UNK]\nred\n");
  const std::vector<std::pair<std::function<void(RunConfig&)>, std::string>> cases = {
      {[](RunConfig& c) { c.task.label_smoothing = 1.0; }, "task.label_smoothing must be in [0, 1)"},
      {[](RunConfig& c) { c.task.beams = 0; }, "task.beams must be >= 1"},
      {[](RunConfig& c) { c.model.family = "gpt2"; }, "model.family must be empty or transformer"},
      {[](RunConfig& c) { c.model.max_positions = 8; }, "model.max_positions (8) is below task.truncate (16)"},
      {[](RunConfig& c) { c.task.data = ""; }, "needs task.data"},
      {[&](RunConfig& c) { c.task.data = (dir / "bad_train.tsv").string(); },
       "bad_train.tsv:2: expected 2 tab-separated columns, got 1"},
      {[&](RunConfig& c) { c.task.tokenizer = (dir / "vocab_nosep.txt").string(); }, "has no end token"},
      // Models that cannot fit are refused before anything is allocated (memory_budget.h).
      {[](RunConfig& c) { c.model.layers = 100000000000; }, "model.layers = 100000000000 (each stack)"},
      {[](RunConfig& c) { c.model.hidden = 1000000000; }, "this process may use"},
      {[](RunConfig& c) { c.model.hidden = int64_t{1} << 41; }, "model.hidden: 2199023255552 is larger than 2^40"},
  };
  for (const auto& [change, expected] : cases) {
    auto c = config;
    change(c);
    const std::string message = error_of([&] { make_task(c); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace attnkit::train
