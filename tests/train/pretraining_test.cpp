// The pretraining objectives (pretraining.h) and the mlm / plm tasks: masking statistics within
// binomial bounds, special tokens and padding never masked, whole words masked whole, the
// permutation batch against a brute-force construction, plm with the identity order = the causal
// LM, bad inputs as one-line errors, and tiny models that learn a cloze and a permutation task;
// XLNet's two streams: the content stream is the single stream, the query stream never sees its
// own token, and a tiny model learns with two streams what a single stream cannot.
#include "attnkit/error.h"
#include "attnkit/models/task_model.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/train/pretraining.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "support/run_configs.h"
#include "support/statistics.h"
#include "support/test_files.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::expect_binomial;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;
namespace fs = std::filesystem;
using Ids = std::vector<int64_t>;


// [PAD] [UNK] [CLS] [SEP] [MASK], then `words` ordinary tokens w0.. and their "##x" pieces.
fs::path write_vocab(const fs::path& dir, int words) {
  std::string text = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 0; i < words; ++i) text += "w" + std::to_string(i) + "\n";
  text += "##x\n##y\n";
  write_bytes(dir / "vocab.txt", text);
  return dir / "vocab.txt";
}

TEST(Pretraining, MaskingStatisticsHoldWithinBinomialBounds) {
  const auto dir = scratch_directory("pretraining_stats");
  const auto vocabulary = masking_vocabulary(text::load_tokenizer(write_vocab(dir, 40).string()));
  ASSERT_EQ(vocabulary.mask_id, 4);
  ASSERT_EQ(vocabulary.ordinary.size(), 42u);  // w0..w39, ##x, ##y
  for (int64_t id = 0; id < 5; ++id) EXPECT_TRUE(vocabulary.special[id]) << id;
  MaskingOptions options;  // 15%, 80/10/10
  int64_t candidates = 0, selected = 0, masked = 0, random = 0;
  std::mt19937 rng(3);
  for (uint64_t batch = 0; batch < 200; ++batch) {
    std::vector<Ids> rows(8);
    for (auto& row : rows) {
      row.push_back(2);  // [CLS]
      const int length = 20 + static_cast<int>(rng() % 40);
      for (int i = 0; i < length; ++i) row.push_back(5 + static_cast<int64_t>(rng() % 42));
      row.push_back(3);                                      // [SEP]
      row.insert(row.end(), rng() % 5, int64_t{0});          // [PAD]s
    }
    std::vector<const Ids*> pointers;
    for (const auto& r : rows) pointers.push_back(&r);
    const auto out = mask_tokens(pointers, vocabulary, options, 11, batch);
    const auto again = mask_tokens(pointers, vocabulary, options, 11, batch);
    ASSERT_EQ(out.inputs, again.inputs);  // a pure function of (seed, stream)
    ASSERT_EQ(out.labels, again.labels);
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t i = 0; i < rows[r].size(); ++i) {
        const int64_t original = rows[r][i], input = out.inputs[r][i], label = out.labels[r][i];
        if (vocabulary.special[original]) {  // [CLS], [SEP] and padding: never touched
          ASSERT_EQ(label, models::kIgnoreLabel);
          ASSERT_EQ(input, original);
          continue;
        }
        ++candidates;
        if (label == models::kIgnoreLabel) {
          ASSERT_EQ(input, original);
          continue;
        }
        ASSERT_EQ(label, original);
        ++selected;
        if (input == vocabulary.mask_id) ++masked;
        else if (input != original) {
          ++random;
          ASSERT_FALSE(vocabulary.special[input]) << "a random replacement drew a special token";
        }
      }
  }
  ASSERT_GT(candidates, 50000);
  expect_binomial(selected, candidates, 0.15, "selected");
  expect_binomial(masked, selected, 0.8, "[MASK]");
  // A random draw equals the original 1 time in 42 (then the token reads as unchanged).
  expect_binomial(random, selected, 0.1 * 41.0 / 42.0, "random");
  // Another stream masks differently; another probability selects accordingly.
  std::vector<Ids> rows(64, Ids(50, 7));
  std::vector<const Ids*> pointers;
  for (const auto& r : rows) pointers.push_back(&r);
  EXPECT_NE(mask_tokens(pointers, vocabulary, options, 11, 0).labels,
            mask_tokens(pointers, vocabulary, options, 11, 1).labels);
  options.probability = 0.5;
  int64_t half = 0;
  for (const auto& labels : mask_tokens(pointers, vocabulary, options, 1, 0).labels)
    half += std::count(labels.begin(), labels.end(), int64_t{7});
  expect_binomial(half, 64 * 50, 0.5, "p = 0.5");
}

TEST(Pretraining, WholeWordMaskingMasksWholeWords) {
  const auto dir = scratch_directory("pretraining_whole_word");
  const auto tokenizer = text::load_tokenizer(write_vocab(dir, 10).string());
  const auto vocabulary = masking_vocabulary(tokenizer);
  const int64_t x = *tokenizer.token_to_id("##x"), y = *tokenizer.token_to_id("##y");
  EXPECT_TRUE(vocabulary.continuation[x] && vocabulary.continuation[y] && !vocabulary.continuation[5]);
  // Words of 1-3 tokens: w? (##x) (##y).
  std::mt19937 rng(5);
  std::vector<Ids> rows(400);
  std::vector<std::vector<std::pair<size_t, size_t>>> words(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].push_back(2);
    for (int w = 0; w < 12; ++w) {
      const size_t first = rows[r].size();
      rows[r].push_back(5 + static_cast<int64_t>(rng() % 10));
      if (rng() % 2) rows[r].push_back(x);
      if (rng() % 2) rows[r].push_back(y);
      words[r].emplace_back(first, rows[r].size());
    }
    rows[r].push_back(3);
  }
  std::vector<const Ids*> pointers;
  for (const auto& r : rows) pointers.push_back(&r);
  MaskingOptions options;
  for (bool whole : {true, false}) {
    options.whole_word = whole;
    const auto out = mask_tokens(pointers, vocabulary, options, 2, 0);
    int64_t split = 0, selected = 0, total = 0;
    for (size_t r = 0; r < rows.size(); ++r)
      for (const auto& [first, last] : words[r]) {
        int64_t labelled = 0;
        for (size_t i = first; i < last; ++i) labelled += out.labels[r][i] != models::kIgnoreLabel;
        split += labelled > 0 && labelled < static_cast<int64_t>(last - first);
        selected += labelled > 0;
        ++total;
      }
    if (whole) {
      EXPECT_EQ(split, 0) << "a word was masked in part";
      expect_binomial(selected, total, 0.15, "words selected");
    } else {
      EXPECT_GT(split, 100) << "token-level masking splits words";
    }
  }
}

TEST(Pretraining, BadMaskingSettingsAreOneLineErrors) {
  for (double p : {-0.1, 0.0, 1.5, std::nan("")}) {
    MaskingOptions o;
    o.probability = p;
    EXPECT_NE(error_of([&] { o.validate(); }).find("task.mask_probability: "), std::string::npos) << p;
  }
  MaskingOptions o;
  o.random_fraction = -0.5;
  EXPECT_EQ(error_of([&] { o.validate(); }), "task.random_fraction: -0.5 is outside [0, 1]");
  o.random_fraction = 0.3;
  EXPECT_EQ(error_of([&] { o.validate(); }), "task.mask_fraction + task.random_fraction = 1.1 exceeds 1");
  const auto dir = scratch_directory("pretraining_no_mask");
  write_bytes(dir / "vocab.txt", "[PAD]\n[UNK]\nw\n");
  EXPECT_EQ(error_of([&] { masking_vocabulary(text::load_tokenizer((dir / "vocab.txt").string())); }),
            "masked LM: the tokenizer has no [MASK] or <mask> token");
}

RunConfig text_config(const std::string& task, const fs::path& data, const fs::path& vocab) {
  RunConfig c = attnkit::testing::quiet_tiny_run(task, 16, 32, 2, 4);
  c.task.data = data.string();
  c.task.tokenizer = vocab.string();
  c.task.truncate = 16;
  c.trainer.optimizer.learning_rate = 3e-3;
  c.trainer.schedule.warmup_steps = 10;
  return c;
}

TEST(Pretraining, MlmBadInputsAreOneLineErrors) {
  const auto dir = scratch_directory("pretraining_mlm_errors");
  const auto vocab = write_vocab(dir, 10);
  write_bytes(dir / "empty.txt", "");
  write_bytes(dir / "short.txt", "w1 w2 w3 w4 w5\n");
  auto config = text_config("mlm", dir / "empty.txt", vocab);
  EXPECT_EQ(error_of([&] { make_task(config); }),
            fmt::format("task 'mlm': {} holds no text (an empty corpus)", (dir / "empty.txt").string()));
  config.task.data = (dir / "short.txt").string();
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "task 'mlm': 6 tokens make 0 block(s) of 14; need at least 2 (one for validation): add text or lower "
            "task.truncate");
  // Settings are checked before anything is read (the data file need not exist).
  config.task.data = (dir / "absent.txt").string();
  config.task.mask_probability = 1.5;
  EXPECT_EQ(error_of([&] { make_task(config); }), "task.mask_probability: 1.5 is outside (0, 1]");
  config.task.mask_probability = 0.15;
  config.task.whole_word = true;
  write_bytes(dir / "plain.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nw\n");
  config.task.tokenizer = (dir / "plain.txt").string();
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "task.whole_word: the tokenizer has no WordPiece \"##\" pieces to group into words");
}

// A cloze a tiny model can only solve from context: each line repeats one pair "ki vi" (10 pairs),
// so a masked token is the key or value (by position) of the pair the visible tokens show.
TEST(Pretraining, MlmLearnsASyntheticCloze) {
  const auto dir = scratch_directory("pretraining_cloze");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 0; i < 10; ++i) vocab += "k" + std::to_string(i) + "\nv" + std::to_string(i) + "\n";
  write_bytes(dir / "vocab.txt", vocab);
  std::mt19937 rng(9);
  std::string text;
  for (int line = 0; line < 400; ++line) {
    const auto i = std::to_string(rng() % 10);
    for (int pair = 0; pair < 7; ++pair) text += "k" + i + " v" + i + " ";
    text += "\n";
  }
  write_bytes(dir / "train.txt", text);
  auto config = text_config("mlm", dir / "train.txt", dir / "vocab.txt");
  config.trainer.steps = 250;
  auto task = make_task(config);
  EXPECT_EQ(task->primary_metric(), "perplexity");
  EXPECT_EQ(task_model(*task)->config().attention.causal, false);
  // Resume-exact: micro-batch 3 is the same from a second task; micro-batch 4 is another.
  auto twin = make_task(config);
  const double loss3 = task->train_loss(3, 0, 1).loss.item<double>();
  EXPECT_EQ(twin->train_loss(3, 0, 1).loss.item<double>(), loss3);
  EXPECT_NE(task->train_loss(4, 0, 1).loss.item<double>(), loss3);
  Trainer trainer(*task, config.trainer);
  const auto before = trainer.evaluate();
  const auto after = trainer.train().last_metrics;
  // 25 ids: chance accuracy ~0.05, ~0.1 knowing keys from values by position. The CLI run of
  // the same settings reached masked accuracy 1.0 and perplexity 1.24 at step 250.
  EXPECT_LT(before.at("masked_accuracy"), 0.25);
  EXPECT_GT(after.at("masked_accuracy"), 0.7);
  EXPECT_LT(after.at("perplexity"), 2.5);
  EXPECT_LT(after.at("perplexity"), before.at("perplexity") * 0.2);
  // On the targets whose input is [MASK] the frequency baseline depends on the data alone: 20
  // ids about equally frequent, perplexity near 20 and accuracy near 1/20, the same before and
  // after training; the trained model, which reads the context, far below it there.
  EXPECT_EQ(after.at("unigram_perplexity"), before.at("unigram_perplexity"));
  EXPECT_EQ(after.at("unigram_accuracy"), before.at("unigram_accuracy"));
  EXPECT_GT(after.at("unigram_perplexity"), 15);
  EXPECT_LE(after.at("unigram_perplexity"), 25);
  EXPECT_LT(after.at("unigram_accuracy"), 0.2);
  EXPECT_GT(after.at("mask_input_accuracy"), 0.7);
  EXPECT_LT(after.at("mask_input_perplexity"), after.at("unigram_perplexity") * 0.2);
}

TEST(Pretraining, PermutationBatchMatchesBruteForce) {
  std::mt19937 rng(1);
  for (int64_t n : {2, 3, 7, 12}) {
    std::vector<Ids> rows(5, Ids(n));
    for (auto& row : rows)
      for (auto& id : row) id = 10 + static_cast<int64_t>(rng() % 50);
    std::vector<const Ids*> pointers;
    for (const auto& r : rows) pointers.push_back(&r);
    const auto orders = sample_orders(rows.size(), n, 4, static_cast<uint64_t>(n));
    for (int64_t k : {int64_t{0}, int64_t{1}, n - 1}) {
      const auto batch = permutation_batch(pointers, orders, k);
      ASSERT_EQ(batch.mask.sizes(), (std::vector<int64_t>{5, 1, n, n}));
      const int64_t predicted = k == 0 ? n - 1 : k;
      for (size_t b = 0; b < rows.size(); ++b) {
        for (int64_t i = 0; i < n; ++i) {
          // Brute force: where i and j stand in the order.
          const auto rank = [&](int64_t p) { return std::find(orders[b].begin(), orders[b].end(), p) - orders[b].begin(); };
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_EQ(batch.mask[b][0][i][j].item<bool>(), rank(j) <= rank(i)) << b << " " << i << " " << j;
            ASSERT_EQ(batch.query_mask[b][0][i][j].item<bool>(), rank(j) < rank(i)) << b << " " << i << " " << j;
          }
          const int64_t next = rank(i) + 1;
          const int64_t expected = next < n && next >= n - predicted ? rows[b][orders[b][next]] : models::kIgnoreLabel;
          ASSERT_EQ(batch.targets[b][i].item<int64_t>(), expected);
          // Two streams: the same tokens, each predicted at its own position.
          const bool target = rank(i) >= n - predicted;
          ASSERT_EQ(batch.query_targets[b][i].item<int64_t>(), target ? rows[b][i] : models::kIgnoreLabel);
        }
      }
      EXPECT_EQ(batch.targets.ne(models::kIgnoreLabel).sum().item<int64_t>(), 5 * predicted);
      EXPECT_EQ(batch.query_targets.ne(models::kIgnoreLabel).sum().item<int64_t>(), 5 * predicted);
    }
  }
  // Orders are permutations, a pure function of (seed, stream).
  const auto a = sample_orders(3, 9, 1, 2);
  EXPECT_EQ(a, sample_orders(3, 9, 1, 2));
  EXPECT_NE(a, sample_orders(3, 9, 1, 3));
  for (auto order : a) {
    std::sort(order.begin(), order.end());
    for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(order[i], i);
  }
  Ids row{1, 2, 3};
  EXPECT_NE(error_of([&] { permutation_batch({&row}, {{0, 1, 1}}, 0); }).find("permutation"), std::string::npos);
  EXPECT_EQ(error_of([&] { permutation_batch({&row}, {{0, 1, 2}}, 3); }),
            "task.predict_last: 3 is outside [0, 2] (0 = all; a block of 3 tokens has 2 predictions)");
}

TEST(Pretraining, IdentityOrderIsTheCausalLm) {
  auto config = models::preset("bert", {60, 32, 2, 4, 0, 0});
  config.max_positions = 16;
  config.dropout = 0;
  models::HeadsConfig heads;
  heads.causal_lm = true;
  torch::manual_seed(3);
  models::TaskModel plm(config, heads);
  config.attention.causal = true;
  models::TaskModel causal(config, heads);
  {
    torch::NoGradGuard no_grad;
    auto source = plm->named_parameters(true);
    for (auto& p : causal->named_parameters(true)) p.value().copy_(*source.find(p.key()));
  }
  plm->eval();
  causal->eval();
  std::vector<Ids> rows(3, Ids(10));
  std::mt19937 rng(2);
  for (auto& row : rows)
    for (auto& id : row) id = 5 + static_cast<int64_t>(rng() % 50);
  std::vector<const Ids*> pointers;
  for (const auto& r : rows) pointers.push_back(&r);
  std::vector<Ids> identity(3, Ids(10));
  for (auto& order : identity) std::iota(order.begin(), order.end(), int64_t{0});
  auto loss_of = [&](const std::vector<Ids>& orders) {
    const auto batch = permutation_batch(pointers, orders, 0);
    models::TaskInputs in;
    in.input_ids = batch.input_ids;
    in.mask = batch.mask;
    return models::cross_entropy(plm->forward(in).causal_lm_logits, batch.targets).item<double>();
  };
  models::TaskInputs in;
  in.input_ids = permutation_batch(pointers, identity, 0).input_ids;
  const double causal_loss =
      models::cross_entropy(causal->forward(in).causal_lm_logits, models::next_token_targets(in.input_ids)).item<double>();
  EXPECT_NEAR(loss_of(identity), causal_loss, 1e-5);
  EXPECT_GT(std::abs(loss_of(sample_orders(3, 10, 1, 1)) - causal_loss), 1e-3);  // the test can fail
}

// A tiny bidirectional model with XLNet's query stream, in eval mode (no dropout).
models::TaskModel two_stream_model(const std::string& family, int64_t vocab, int64_t n) {
  auto config = models::preset(family, {vocab, 32, 2, 4, 0, 0});
  config.attention.causal = false;
  config.max_positions = n;
  config.dropout = 0;
  models::HeadsConfig heads;
  heads.causal_lm = true;
  heads.query_stream = true;
  torch::manual_seed(5);
  models::TaskModel model(config, heads);
  model->eval();
  return model;
}

// Test (b) of two streams: the content stream is the single-stream forward, and both streams are
// finite (the first of each order attends nothing in the query stream), gradients included.
TEST(Pretraining, TwoStreamContentStreamIsTheSingleStreamForward) {
  const int64_t n = 9;
  for (const char* family : {"gpt2", "bert"}) {  // pre-LN and post-LN blocks
    SCOPED_TRACE(family);
    auto model = two_stream_model(family, 40, n);
    std::vector<Ids> rows(3, Ids(n));
    std::mt19937 rng(6);
    for (auto& row : rows)
      for (auto& id : row) id = 5 + static_cast<int64_t>(rng() % 35);
    std::vector<const Ids*> pointers;
    for (const auto& r : rows) pointers.push_back(&r);
    const auto batch = permutation_batch(pointers, sample_orders(3, n, 2, 0), 0);
    models::TaskInputs in;
    in.input_ids = batch.input_ids;
    in.mask = batch.mask;
    in.output_hidden_states = true;
    const auto single = model->forward(in);
    const auto two = model->two_stream_forward(in, batch.query_mask);
    EXPECT_TRUE(torch::equal(two.content.last_hidden_state, single.base.last_hidden_state));
    ASSERT_EQ(two.content.hidden_states.size(), single.base.hidden_states.size());
    for (size_t l = 0; l < single.base.hidden_states.size(); ++l)
      EXPECT_TRUE(torch::equal(two.content.hidden_states[l], single.base.hidden_states[l])) << l;
    ASSERT_EQ(two.query_logits.sizes(), single.causal_lm_logits.sizes());
    EXPECT_TRUE(torch::isfinite(two.query_logits).all().item<bool>());
    // The query stream is not the content stream (the test can fail).
    EXPECT_GT((two.query_hidden - two.content.last_hidden_state).abs().max().item<double>(), 1e-3);
    model->train();
    auto loss = models::cross_entropy(model->two_stream_forward(in, batch.query_mask).query_logits,
                                      batch.query_targets);
    loss.backward();
    for (const auto& p : model->named_parameters(true)) {
      if (p.key().find("pooler") != std::string::npos) continue;  // bert's: not on the LM path
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    }
    EXPECT_GT(model->query_start.grad().abs().max().item<double>(), 0.0);
  }
  // The flag travels with the heads config (a checkpoint reloads its start vector); absent when off.
  models::HeadsConfig heads;
  heads.causal_lm = true;
  EXPECT_FALSE(nlohmann::json(heads).contains("query_stream"));
  heads.query_stream = true;
  EXPECT_TRUE(nlohmann::json(heads).get<models::HeadsConfig>().query_stream);
  heads.causal_lm = false;
  EXPECT_EQ(error_of([&] { models::TaskModel(models::preset("gpt2", {40, 32, 2, 4, 0, 0}), heads); }),
            "heads config: query_stream needs the causal LM head (causal_lm = true)");
}

// Test (a) of two streams: changing the token at p changes the query stream at i iff p comes
// before i in the order (never at p itself: it knows p's position, not its token), and the
// content stream at i iff p comes no later than i.
TEST(Pretraining, TwoStreamQueryOutputsNeverSeeTheirOwnToken) {
  const int64_t n = 7;
  for (const char* family : {"gpt2", "bert"}) {
    SCOPED_TRACE(family);
    auto model = two_stream_model(family, 30, n);
    torch::NoGradGuard no_grad;
    const Ids row{5, 9, 12, 7, 20, 15, 11};
    const auto orders = sample_orders(1, n, 3, 1);
    std::vector<int64_t> rank(n);
    for (int64_t t = 0; t < n; ++t) rank[orders[0][t]] = t;
    auto run = [&](const Ids& r) {
      const auto batch = permutation_batch({&r}, orders, 0);
      models::TaskInputs in;
      in.input_ids = batch.input_ids;
      in.mask = batch.mask;
      return model->two_stream_forward(in, batch.query_mask);
    };
    const auto base = run(row);
    for (int64_t p = 0; p < n; ++p) {
      Ids changed = row;
      changed[p] = 25;
      const auto other = run(changed);
      for (int64_t i = 0; i < n; ++i) {
        const double query = (other.query_hidden[0][i] - base.query_hidden[0][i]).abs().max().item<double>();
        const double content =
            (other.content.last_hidden_state[0][i] - base.content.last_hidden_state[0][i]).abs().max().item<double>();
        if (rank[p] < rank[i])
          EXPECT_GT(query, 1e-5) << "p " << p << " i " << i;
        else
          EXPECT_EQ(query, 0.0) << "p " << p << " i " << i;
        if (rank[p] <= rank[i])
          EXPECT_GT(content, 1e-5) << "p " << p << " i " << i;
        else
          EXPECT_EQ(content, 0.0) << "p " << p << " i " << i;
      }
    }
  }
}

TEST(Pretraining, PlmRefusesKindsWithoutAGeneralMaskAndBadSettings) {
  const auto dir = scratch_directory("pretraining_plm_errors");
  const auto vocab = write_vocab(dir, 10);
  auto config = text_config("plm", dir / "absent.txt", vocab);
  for (const char* kind : {"linear:elu", "cosformer"}) {
    config.model.attention = kind;
    const auto error = error_of([&] { make_task(config); });
    EXPECT_EQ(error, fmt::format("task 'plm': model.attention '{}' cannot take the permutation mask (it "
                                 "takes causality, padding and prefix lengths only); use softmax, talking-heads or "
                                 "a synthesizer kind", kind));
  }
  // Two streams take the same masks: the same refusal, before anything is read.
  config.task.two_stream = true;
  config.model.attention = "cosformer";
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "task 'plm': model.attention 'cosformer' cannot take the permutation mask (it takes causality, padding "
            "and prefix lengths only); use softmax, talking-heads or a synthesizer kind");
  config.model.attention = "softmax";
  config.model.positions = "none";
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "task.two_stream: model.positions = none gives the query stream nothing to know its position by (use "
            "learned or sinusoidal)");
  config.model.positions = "learned";
  config.task.two_stream = false;
  config.task.predict_last = 16;
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "task.predict_last: 16 is outside [0, 15] (0 = all; a block of task.truncate = 16 tokens has 15 "
            "predictions)");
}

// Trains plm (task.truncate 8, task.predict_last 4, hidden 64, batch 32, 400 steps) on 600 lines
// of the symbols s0..s7, each line the 8 symbol numbers `line(rng)` draws; the validation loss
// before and after.
std::pair<double, double> train_plm_on_symbols(const std::string& name, bool two_stream,
                                               const std::function<std::vector<int>(std::mt19937&)>& line) {
  const auto dir = scratch_directory(name);
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 0; i < 8; ++i) vocab += "s" + std::to_string(i) + "\n";
  write_bytes(dir / "vocab.txt", vocab);
  std::mt19937 rng(4);
  std::string text;
  for (int count = 0; count < 600; ++count) {
    for (int s : line(rng)) text += "s" + std::to_string(s) + " ";
    text += "\n";
  }
  write_bytes(dir / "train.txt", text);
  auto config = text_config("plm", dir / "train.txt", dir / "vocab.txt");
  config.task.truncate = 8;
  config.task.predict_last = 4;
  config.task.batch_size = 32;
  config.task.two_stream = two_stream;
  config.model.hidden = 64;
  config.trainer.steps = 400;
  auto task = make_task(config);
  Trainer trainer(*task, config.trainer);
  const double before = trainer.evaluate().at("loss");
  return {before, trainer.train().last_metrics.at("loss")};
}

// Blocks that are permutations of s0..s7: the next token of the order is one not seen yet, so
// the best loss over the last 4 predictions is (ln 4 + ln 3 + ln 2 + ln 1) / 4 = 0.79; a model
// that ignores what it sees does no better than ln 8 = 2.08 over the 8 symbols.
TEST(Pretraining, PlmLearnsASyntheticPermutationTask) {
  const auto [before, after] = train_plm_on_symbols("pretraining_plm", false, [](std::mt19937& rng) {
    std::vector<int> symbols{0, 1, 2, 3, 4, 5, 6, 7};
    std::shuffle(symbols.begin(), symbols.end(), rng);
    return symbols;
  });
  // Runs of these settings (seeds 0, 1) ended at 0.90 and 0.95.
  EXPECT_GT(before, 2.0);
  EXPECT_LT(after, 1.4);
}

// Blocks that are rotations s_k s_k+1 ... s_k+7 (mod 8) of one random k: one token seen and the
// position to predict give the token, so two streams can reach loss 0 over the last 4 of each
// order, while a single stream, not knowing which position comes next, can do no better than
// (ln 4 + ln 3 + ln 2) / 4 = 0.79 (the unseen tokens are equally likely next); a model that knows
// the position but ignores what it sees gets ln 8 = 2.08.
TEST(Pretraining, PlmTwoStreamLearnsWhereTheSingleStreamCannot) {
  const auto [before, after] = train_plm_on_symbols("pretraining_plm_two_stream", true, [](std::mt19937& rng) {
    const int k = static_cast<int>(rng() % 8);
    std::vector<int> symbols;
    for (int i = 0; i < 8; ++i) symbols.push_back((k + i) % 8);
    return symbols;
  });
  // This run reached 0.006 (and the command-line runs of docs/training.md 0.006 and 0.001,
  // where a single stream stayed at 0.95 and 0.87).
  EXPECT_GT(before, 2.0);
  EXPECT_LT(after, 0.5);  // below the single stream's best, 0.79
}

}  // namespace
}  // namespace attnkit::train
