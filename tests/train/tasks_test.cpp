// Run configs (TOML + overrides) and the concrete tasks the CLI trains: configs round-trip and
// reject bad input with file:line, every task builds its model and data, batches are a pure
// function of (index, rank, world), and a small copy-task run learns.
#include "attnkit/error.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "support/run_configs.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;

RunConfig tiny(const std::string& task) {
  RunConfig c = attnkit::testing::quiet_tiny_run(task, 8, 16, 1, 2);
  c.task.min_length = 4;
  c.task.max_length = 8;
  c.task.train_examples = 64;
  c.task.eval_examples = 16;
  c.task.symbols = 6;
  return c;
}

// A small model on a task read from files with a WordPiece vocab, trained at a high rate.
RunConfig text_task(const std::string& task, const std::filesystem::path& data,
                    const std::filesystem::path& vocab, int64_t layers, int64_t steps) {
  auto config = tiny(task);
  config.task.data = data.string();
  config.task.tokenizer = vocab.string();
  config.task.truncate = 32;
  config.model.hidden = 32;
  config.model.layers = layers;
  config.trainer.steps = steps;
  config.trainer.optimizer.learning_rate = 3e-3;
  config.trainer.schedule.warmup_steps = 10;
  return config;
}

// Builds the task, checks its primary metric, and trains it: the metrics before and after.
struct Trained {
  std::map<std::string, double> before, after;
};
Trained train_task(const RunConfig& config, const std::string& primary_metric) {
  auto task = make_task(config);
  EXPECT_EQ(task->primary_metric(), primary_metric);
  EXPECT_EQ(task->train_loss(2, 0, 1).loss.item<double>(), task->train_loss(2, 0, 1).loss.item<double>());
  Trainer trainer(*task, config.trainer);
  Trained out;
  out.before = trainer.evaluate();
  out.after = trainer.train().last_metrics;
  return out;
}

TEST(RunConfig, TomlRoundTripAndOverrides) {
  RunConfig c;
  apply_setting(c, "model", "hidden", "256");
  apply_setting(c, "optimizer", "name", "sgd");
  apply_setting(c, "schedule", "kind", "linear");
  apply_setting(c, "task", "data", "a \"quoted\" path");
  apply_setting(c, "optimizer", "lr", "3e-4");
  const auto dir = scratch_directory("run_config");
  const auto path = (dir / "run.toml").string();
  write_bytes(path, to_toml(c));
  RunConfig back;
  apply_toml_file(back, path);
  EXPECT_EQ(to_toml(back), to_toml(c));
  EXPECT_EQ(back.model.hidden, 256);
  EXPECT_EQ(back.trainer.optimizer.kind, OptimizerKind::kSgd);
  EXPECT_EQ(back.task.data, "a \"quoted\" path");
  EXPECT_DOUBLE_EQ(back.trainer.optimizer.learning_rate, 3e-4);
}

TEST(RunConfig, BadInputNamesFileLineAndKey) {
  const auto dir = scratch_directory("run_config_bad");
  const auto path = (dir / "run.toml").string();
  RunConfig c;
  write_bytes(path, "[model]\nhidden = 64\nwidth = 3\n");
  EXPECT_NE(error_of([&] { apply_toml_file(c, path); }).find("run.toml:3: model.width: unknown setting"),
            std::string::npos);
  write_bytes(path, "[run]\nsteps = \"many\"\n");
  EXPECT_NE(error_of([&] { apply_toml_file(c, path); }).find("run.toml:2: run.steps: 'many' is not an integer"),
            std::string::npos);
  write_bytes(path, "[run\nsteps = 3\n");
  EXPECT_NE(error_of([&] { apply_toml_file(c, path); }).find("run.toml:1"), std::string::npos);
  EXPECT_THROW(apply_setting(c, "optimizer", "name", "lion"), Error);
  EXPECT_THROW(apply_setting(c, "run", "ema", "x"), Error);
}

TEST(Tasks, EveryTaskBuildsAndBatchesAreDeterministic) {
  const auto dir = scratch_directory("tasks");
  for (const char* name : {"listops", "copy", "reverse", "sort", "recall"}) {
    auto config = tiny(name);
    if (std::string(name) == "listops") {
      config.task.min_length = 10;
      config.task.max_length = 40;
    }
    auto task = make_task(config);
    task->module().eval();
    auto a = task->train_loss(3, 0, 1), b = task->train_loss(3, 0, 1);
    EXPECT_TRUE(std::isfinite(a.loss.item<double>())) << name;
    EXPECT_EQ(a.loss.item<double>(), b.loss.item<double>()) << name;
    EXPECT_GT(a.tokens, 0) << name;
    // Rank 1 of 2 reads other examples than rank 0 at the same index.
    EXPECT_NE(task->train_loss(3, 0, 2).loss.item<double>(), task->train_loss(3, 1, 2).loss.item<double>())
        << name;
    torch::NoGradGuard no_grad;
    auto metrics = task->evaluate();
    EXPECT_TRUE(metrics.count(task->primary_metric())) << name;
    EXPECT_EQ(task_model(*task)->config().family,
              std::string(name) == "listops" ? models::ModelFamily::Bert : models::ModelFamily::Gpt2);
  }
  auto bad = tiny("translate");
  EXPECT_NE(error_of([&] { make_task(bad); }).find("task.name: 'translate'"), std::string::npos);
  auto lm = tiny("lm");
  EXPECT_NE(error_of([&] { make_task(lm); }).find("needs task.data"), std::string::npos);
  auto listops = tiny("listops");
  listops.task.data = dir.string();
  EXPECT_NE(error_of([&] { make_task(listops); }).find("attnkit data listops"), std::string::npos);
}

TEST(Tasks, CopyTaskLearns) {
  auto config = tiny("copy");
  config.task.min_length = 3;
  config.task.max_length = 5;
  config.task.train_examples = 512;
  config.task.symbols = 4;
  config.model.hidden = 32;
  config.model.layers = 2;
  config.trainer.steps = 300;
  config.trainer.optimizer.learning_rate = 3e-3;
  config.trainer.schedule.warmup_steps = 10;
  auto task = make_task(config);
  Trainer trainer(*task, config.trainer);
  const auto before = trainer.evaluate();
  const auto result = trainer.train();
  // A random model predicts the target tokens at about chance (1/4 over 4 symbols + [SEP]-free
  // targets). After 300 steps seeds 1-6 reach loss 0.10-0.20x the initial and token accuracy
  // 0.88-0.94, so both bounds hold with a wide margin on any machine.
  EXPECT_LT(result.last_metrics.at("loss"), before.at("loss") * 0.6);
  EXPECT_GT(result.last_metrics.at("token_accuracy"), 0.5);
}

TEST(Tasks, TaggingTaskLearnsWordTags) {
  // Tags that follow from the word itself (persons, places, rest O), with words split into
  // several WordPiece sub-words: the task labels only first sub-words and scores per word.
  const auto dir = scratch_directory("tagging_task");
  write_bytes((dir / "vocab.txt").string(),
             "[PAD]\n[UNK]\n[CLS]\n[SEP]\nalice\nbob\npar\n##is\nrome\nmet\nin\nsaw\nand\nlon\n##don\n");
  const std::vector<std::string> people{"alice", "bob"}, places{"paris", "rome", "london"},
      verbs{"met", "saw"};
  std::mt19937 rng(7);
  auto sentences = [&](int count) {
    std::string text;
    for (int i = 0; i < count; ++i) {
      const auto& a = people[rng() % 2];
      const auto& b = people[rng() % 2];
      const auto& v = verbs[rng() % 2];
      const auto& p = places[rng() % 3];
      text += a + " " + v + " " + b + " in " + p + "\tB-PER O B-PER O B-LOC\n";
    }
    return text;
  };
  write_bytes((dir / "ner_train.tsv").string(), sentences(200));
  write_bytes((dir / "ner_val.tsv").string(), sentences(20));
  auto config = text_task("tagging", dir / "ner_train.tsv", dir / "vocab.txt", 1, 120);
  const auto run = train_task(config, "f1");
  EXPECT_LT(run.before.at("f1"), 0.9);
  EXPECT_GT(run.after.at("f1"), 0.95);
  EXPECT_GT(run.after.at("token_accuracy"), 0.95);
  // A validation tag the training file never uses is an error naming it.
  write_bytes((dir / "bad_train.tsv").string(), "alice met bob\tB-PER O B-PER\n");
  write_bytes((dir / "bad_val.tsv").string(), "alice met bob\tB-ORG O B-PER\n");
  config.task.data = (dir / "bad_train.tsv").string();
  EXPECT_NE(error_of([&] { make_task(config); }).find("B-ORG"), std::string::npos);
}

TEST(Tasks, SpanTaskLearnsToPointAtTheAnswer) {
  // SQuAD-style JSON: "the cat is very yellow ." / "what is the cat ?" -> "yellow", at varying
  // positions and with answers of one or two WordPiece tokens (yel ##low). Predictions are mapped
  // back to the context's characters and scored with SQuAD's exact match.
  const auto dir = scratch_directory("span_task");
  write_bytes((dir / "vocab.txt").string(),
             "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nis\nwhat\n?\n.\nvery\ncat\ndog\ncar\nred\nblue\nyel\n##low\n");
  const std::vector<std::string> things{"cat", "dog", "car"}, colors{"red", "blue", "yellow"};
  std::mt19937 rng(11);
  auto squad = [&](int count) {
    std::string json = R"({"version": "1.1", "data": [{"title": "t", "paragraphs": [)";
    for (int i = 0; i < count; ++i) {
      const auto& thing = things[rng() % 3];
      const auto& color = colors[rng() % 3];
      std::string context = "the " + thing + " is";
      for (unsigned v = rng() % 4; v > 0; --v) context += " very";
      context += " ";
      const size_t start = context.size();  // ASCII: bytes are characters
      context += color + " .";
      json += std::string(i ? "," : "") + R"({"context": ")" + context + R"(", "qas": [{"id": "q)" +
              std::to_string(i) + R"(", "question": "what is the )" + thing + R"( ?", "answers": [{"text": ")" +
              color + R"(", "answer_start": )" + std::to_string(start) + "}]}]}";
    }
    return json + "]}]}";
  };
  write_bytes((dir / "qa_train.json").string(), squad(300));
  write_bytes((dir / "qa_val.json").string(), squad(30));
  auto config = text_task("span", dir / "qa_train.json", dir / "vocab.txt", 2, 200);
  const auto run = train_task(config, "f1");
  EXPECT_LT(run.before.at("exact_match"), 0.5);
  EXPECT_GT(run.after.at("exact_match"), 0.9);
  EXPECT_GT(run.after.at("f1"), 0.9);
  // An answer whose offset does not match the context is an error naming the question.
  write_bytes((dir / "bad_train.json").string(),
             R"({"data": [{"paragraphs": [{"context": "the cat is red .", "qas": [{"id": "q7", )"
             R"("question": "what ?", "answers": [{"text": "red", "answer_start": 3}]}]}]}]})");
  config.task.data = (dir / "bad_train.json").string();
  EXPECT_NE(error_of([&] { make_task(config); }).find("q7"), std::string::npos);
}

TEST(Tasks, Seq2seqTaskLearnsToTranslateWordByWord) {
  // UniLM on "source<TAB>target" pairs: each source word has a fixed target word, in order, 4
  // words per pair (625 possible sources, 400 drawn for training); one target word is two
  // WordPiece tokens (ze ##ta). BLEU comes from greedy decodes, so it is high only when
  // generation (not just teacher forcing) works.
  const auto dir = scratch_directory("seq2seq_task");
  write_bytes((dir / "vocab.txt").string(),
             "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\nc\nd\ne\nalpha\nbeta\ngamma\ndelta\nze\n##ta\n");
  const std::vector<std::string> from{"a", "b", "c", "d", "e"}, to{"alpha", "beta", "gamma", "delta", "zeta"};
  std::mt19937 rng(5);
  auto pairs = [&](int count) {
    std::string text;
    for (int i = 0; i < count; ++i) {
      std::string source, target;
      for (unsigned w = 0; w < 4; ++w) {
        const unsigned k = rng() % 5;
        source += (w ? " " : "") + from[k];
        target += (w ? " " : "") + to[k];
      }
      text += source + "\t" + target + "\n";
    }
    return text;
  };
  write_bytes((dir / "pairs_train.tsv").string(), pairs(400));
  write_bytes((dir / "pairs_val.tsv").string(), pairs(20));
  // The model learns the rule in a sudden drop of the loss (about 0.3 at step 500, where this test
  // used to stop, so the rounding of one machine's kernels decided pass or fail); by step 1000
  // seeds 1-10 and every forced ISA / OpenBLAS core type give loss < 0.01 and BLEU 1.0.
  auto config = text_task("seq2seq", dir / "pairs_train.tsv", dir / "vocab.txt", 2, 1000);
  const auto run = train_task(config, "bleu");
  EXPECT_LT(run.before.at("bleu"), 0.5);
  EXPECT_GT(run.after.at("token_accuracy"), 0.95);
  EXPECT_GT(run.after.at("bleu"), 0.9);
  // Linear attention and cosFormer take the UniLM mask as prefix lengths (their learning tests:
  // Seq2Seq.UnilmWith* in tests/decode/seq2seq_test.cpp).
  for (const char* kind : {"linear:elu", "cosformer"}) {
    config.model.attention = kind;
    auto task = make_task(config);
    EXPECT_TRUE(std::isfinite(task->train_loss(0, 0, 1).loss.item<double>())) << kind;
  }
}

TEST(Tasks, BadDataLinesStopOrAreSkippedAndCounted) {
  const auto dir = scratch_directory("bad_lines_task");
  write_bytes((dir / "vocab.txt").string(), "[PAD]\n[UNK]\n[CLS]\n[SEP]\ngood\nbad\n");
  write_bytes((dir / "sent_train.tsv").string(), "good good\tpos\nbad\tneg\ngood\tpos\textra\nbad bad\tneg\n");
  write_bytes((dir / "sent_val.tsv").string(), "good\tpos\nbad\tneg\n");
  auto config = text_task("classification", dir / "sent_train.tsv", dir / "vocab.txt", 1, 1);
  EXPECT_NE(error_of([&] { make_task(config); }).find("sent_train.tsv:3"), std::string::npos);
  config.task.skip_bad_lines = true;
  ::testing::internal::CaptureStderr();
  auto task = make_task(config);
  const auto err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("skipped 1 bad line(s)"), std::string::npos) << err;
  EXPECT_NE(err.find("sent_train.tsv:3"), std::string::npos) << err;
  EXPECT_TRUE(std::isfinite(task->train_loss(0, 0, 1).loss.item<double>()));
}

}  // namespace
}  // namespace attnkit::train
