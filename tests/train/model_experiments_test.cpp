// The post list's experiments as training settings (issue 32): ALBERT un-sharing (model.unshare),
// the attention's key and value sizes (model.key_size / model.value_size) and the class-conditional
// LM (task conditional-lm, Conditional LayerNorm).
#include "attnkit/error.h"
#include "attnkit/io/model_directory.h"
#include "attnkit/models/task_model.h"
#include "attnkit/models/transformer_model.h"
#include "attnkit/text/pretrained.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "attnkit/train/trainer.h"
#include "support/run_configs.h"
#include "support/test_files.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
using attnkit::testing::write_bytes;
namespace fs = std::filesystem;


// [PAD] [UNK] [CLS] [SEP] [MASK] w0..w19, and a corpus of random lines over them.
void write_corpus(const fs::path& dir) {
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 0; i < 20; ++i) vocab += "w" + std::to_string(i) + "\n";
  write_bytes(dir / "vocab.txt", vocab);
  std::mt19937 rng(5);
  std::string text;
  for (int line = 0; line < 120; ++line) {
    for (int word = 0; word < 12; ++word) text += "w" + std::to_string(rng() % 20) + " ";
    text += "\n";
  }
  write_bytes(dir / "train.txt", text);
}

RunConfig mlm_config(const fs::path& dir) {
  RunConfig c = attnkit::testing::quiet_tiny_run("mlm", 8, 32, 3, 4);
  c.task.data = (dir / "train.txt").string();
  c.task.tokenizer = (dir / "vocab.txt").string();
  c.task.truncate = 16;
  c.trainer.optimizer.learning_rate = 3e-3;
  return c;
}

at::Tensor hidden_states(models::TaskModel& model) {
  model->eval();
  torch::NoGradGuard no_grad;
  models::TaskInputs in;
  in.input_ids = torch::tensor({5, 9, 4, 12, 20, 7, 3}, at::kLong).unsqueeze(0);
  return model->forward(in).base.last_hidden_state;
}

// An ALBERT saved as a model directory, fine-tuned with its layers shared and un-shared.
TEST(ModelExperiments, UnshareGivesEachAlbertLayerItsOwnCopy) {
  const auto dir = scratch_directory("experiments_unshare");
  write_corpus(dir);
  auto pretrain = mlm_config(dir);
  pretrain.model.family = "albert";
  pretrain.model.embedding_size = 16;
  auto albert = task_model(*make_task(pretrain));
  ASSERT_TRUE(albert->config().share_layers);
  io::save_attnkit_model(albert, (dir / "albert").string());
  fs::copy_file(dir / "vocab.txt", dir / "albert" / "vocab.txt", fs::copy_options::overwrite_existing);
  // Hugging Face layout of the same model.
  auto loaded = io::load_model((dir / "albert").string());
  io::save_model(loaded, (dir / "albert-hf").string(), "huggingface");

  for (const char* layout : {"albert", "albert-hf"}) {
    SCOPED_TRACE(layout);
    auto config = mlm_config(dir);
    config.task.tokenizer.clear();
    config.model.init = (dir / layout).string();
    auto shared_task = make_task(config);
    auto shared = task_model(*shared_task);
    config.model.unshare = true;
    auto task = make_task(config);
    auto model = task_model(*task);
    ASSERT_TRUE(shared->config().share_layers);
    EXPECT_FALSE(model->config().share_layers);
    const auto& t = model->transformer;
    ASSERT_EQ(t->block_count(), 3);
    // Distinct tensors with the shared block's values.
    const auto shared_block = shared->transformer->block(0)->named_parameters();
    for (int64_t layer = 1; layer < 3; ++layer) {
      const auto a = t->block(0)->named_parameters(), b = t->block(layer)->named_parameters();
      ASSERT_EQ(a.size(), b.size());
      for (const auto& item : a) {
        EXPECT_NE(item.value().data_ptr(), b[item.key()].data_ptr()) << item.key();
        EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();
        EXPECT_TRUE(torch::equal(item.value(), shared_block[item.key()])) << item.key();
      }
    }
    const int64_t block_size = models::parameter_count(*shared->transformer->block(0));
    EXPECT_EQ(models::parameter_count(*model), models::parameter_count(*shared) + 2 * block_size);
    EXPECT_GT(block_size, 0);
    EXPECT_TRUE(torch::allclose(hidden_states(model), hidden_states(shared), 0, 1e-6));
    EXPECT_TRUE(torch::allclose(hidden_states(model), hidden_states(albert), 0, 1e-6));

    // A short fine-tune moves the layers apart.
    config.trainer.steps = 5;
    model->train();
    Trainer trainer(*task, config.trainer);
    trainer.train();
    const auto a = t->block(0)->named_parameters(), b = t->block(2)->named_parameters();
    double gap = 0;
    for (const auto& item : a) gap = std::max(gap, (item.value() - b[item.key()]).abs().max().item<double>());
    EXPECT_GT(gap, 1e-5);
    const auto moved = (t->block(0)->named_parameters()["attention.q.weight"] -
                        shared_block["attention.q.weight"]).abs().max().item<double>();
    EXPECT_GT(moved, 1e-5);
  }
}

TEST(ModelExperiments, UnshareRefusesModelsThatShareNothing) {
  const auto dir = scratch_directory("experiments_unshare_errors");
  write_corpus(dir);
  auto config = mlm_config(dir);
  config.model.unshare = true;
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "model.unshare: model.family 'bert' does not share its layers (only an ALBERT-shared model can be "
            "un-shared)");
  auto bert = task_model(*make_task(mlm_config(dir)));
  io::save_attnkit_model(bert, (dir / "bert").string());
  config.model.init = (dir / "bert").string();
  EXPECT_EQ(error_of([&] { make_task(config); }),
            fmt::format("model.unshare: model.init {} does not share its layers (only an ALBERT-shared model "
                        "can be un-shared)",
                        (dir / "bert").string()));
  // From settings, an ALBERT is un-shared before training (each layer its own block).
  config.model.init.clear();
  config.model.family = "albert";
  EXPECT_EQ(task_model(*make_task(config))->transformer->block_count(), 3);
  RunConfig parsed;
  apply_setting(parsed, "model", "unshare", "true");
  EXPECT_TRUE(parsed.model.unshare);
  EXPECT_NE(to_toml(parsed).find("unshare = true"), std::string::npos);
}

// model.key_size / model.value_size: q and k projections of key_size per head, v of value_size,
// saved in the checkpoint's config so the trained model reloads with them.
TEST(ModelExperiments, KeyAndValueSizesBuildTrainAndReload) {
  const auto dir = scratch_directory("experiments_key_size");
  write_corpus(dir);
  auto config = mlm_config(dir);
  config.trainer.run_directory = (dir / "run").string();
  config.model.key_size = 12;  // hidden / heads = 8
  config.model.value_size = 5;
  config.trainer.steps = 3;
  config.trainer.checkpoint_every = 3;
  config.trainer.eval_every = 3;
  auto task = make_task(config);
  auto model = task_model(*task);
  EXPECT_EQ(model->config().attention.key_size, 12);
  EXPECT_EQ(model->config().attention.value_size, 5);
  for (int64_t layer = 0; layer < 3; ++layer) {
    auto attention = model->transformer->attention(layer);
    EXPECT_EQ(attention->q->weight.sizes(), (std::vector<int64_t>{4 * 12, 32}));
    EXPECT_EQ(attention->k->weight.sizes(), (std::vector<int64_t>{4 * 12, 32}));
    EXPECT_EQ(attention->v->weight.sizes(), (std::vector<int64_t>{4 * 5, 32}));
    EXPECT_EQ(attention->o->weight.sizes(), (std::vector<int64_t>{32, 4 * 5}));
  }
  Trainer trainer(*task, config.trainer);
  const auto result = trainer.train();
  EXPECT_TRUE(std::isfinite(result.last_metrics.at("loss")));
  auto loaded = io::load_model(config.trainer.run_directory);
  EXPECT_EQ(loaded.config.attention.key_size, 12);
  EXPECT_EQ(loaded.config.attention.value_size, 5);
  EXPECT_EQ(loaded.transformer->attention(0)->q->weight.sizes(), (std::vector<int64_t>{48, 32}));
  EXPECT_TRUE(torch::equal(loaded.transformer->attention(1)->k->weight, model->transformer->attention(1)->k->weight));
  // The resolved config names them, and a run reads them back.
  RunConfig parsed;
  apply_setting(parsed, "model", "key_size", "12");
  apply_setting(parsed, "model", "value_size", "5");
  EXPECT_EQ(parsed.model.key_size, 12);
  EXPECT_NE(to_toml(parsed).find("key_size = 12"), std::string::npos);
  EXPECT_NE(to_toml(parsed).find("value_size = 5"), std::string::npos);
}

TEST(ModelExperiments, BadKeyAndValueSizesAreOneLineErrors) {
  const auto dir = scratch_directory("experiments_key_size_errors");
  write_corpus(dir);
  auto config = mlm_config(dir);
  config.model.key_size = -1;
  EXPECT_EQ(error_of([&] { make_task(config); }), "model.key_size: -1 must be at least 1 (0 = hidden / heads)");
  config.model.key_size = 0;
  config.model.value_size = -7;
  EXPECT_EQ(error_of([&] { make_task(config); }), "model.value_size: -7 must be at least 1 (0 = hidden / heads)");
  config.model.value_size = int64_t{1} << 41;
  EXPECT_EQ(error_of([&] { make_task(config); }), "model.value_size: 2199023255552 is larger than 2^40");
  // A size that cannot fit is refused by the memory check, naming the setting.
  config.model.value_size = 0;
  config.model.key_size = int64_t{1} << 38;
  const auto message = error_of([&] { make_task(config); });
  EXPECT_NE(message.find("model.key_size = 274877906944"), std::string::npos) << message;
  EXPECT_NE(message.find("this process may use"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// Two classes of texts over disjoint word sets (a0..a7 vs b0..b7), in TSV "text<TAB>label".
void write_labelled(const fs::path& dir) {
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const char* set : {"a", "b"})
    for (int i = 0; i < 8; ++i) vocab += set + std::to_string(i) + "\n";
  write_bytes(dir / "vocab.txt", vocab);
  std::mt19937 rng(17);
  for (const auto& [name, lines] : {std::pair<const char*, int>{"train.tsv", 400}, {"val.tsv", 40}}) {
    std::string text;
    for (int line = 0; line < lines; ++line) {
      const bool a = rng() % 2 == 0;
      for (int word = 0; word < 8; ++word) text += (a ? "a" : "b") + std::to_string(rng() % 8) + " ";
      text += a ? "\tpoems\n" : "\tproverbs\n";
    }
    write_bytes(dir / name, text);
  }
}

RunConfig conditional_config(const fs::path& dir) {
  RunConfig c = attnkit::testing::quiet_tiny_run("conditional-lm", 16, 32, 2, 4);
  c.task.data = (dir / "train.tsv").string();
  c.task.tokenizer = (dir / "vocab.txt").string();
  c.task.truncate = 12;
  c.trainer.steps = 150;
  c.trainer.optimizer.learning_rate = 3e-3;
  c.trainer.schedule.warmup_steps = 10;
  return c;
}

// Samples `steps` tokens after [CLS] for class `condition` (multinomial, fixed seed); the share
// of them (before any [SEP]) whose word starts with `prefix`.
double class_share(models::TaskModel& model, int64_t condition, const text::Tokenizer& tokenizer, char prefix) {
  model->eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  int64_t inside = 0, total = 0;
  auto ids = torch::full({32, 1}, static_cast<int64_t>(*tokenizer.token_to_id("[CLS]")), at::kLong);
  for (int step = 0; step < 8; ++step) {
    models::TaskInputs in;
    in.input_ids = ids;
    in.condition_ids = torch::full({32}, condition, at::kLong);
    auto logits = model->forward(in).causal_lm_logits.select(1, -1);
    auto next = torch::multinomial(torch::softmax(logits, -1), 1);
    ids = torch::cat({ids, next}, 1);
  }
  for (int64_t row = 0; row < 32; ++row)
    for (int64_t col = 1; col < ids.size(1); ++col) {
      const auto* name = tokenizer.id_to_token(static_cast<uint32_t>(ids[row][col].item<int64_t>()));
      const std::string token = name ? *name : "";
      if (token == "[SEP]") break;
      ++total;
      if (!token.empty() && token[0] == prefix) ++inside;
    }
  return total == 0 ? 0.0 : static_cast<double>(inside) / static_cast<double>(total);
}

TEST(ModelExperiments, ConditionalLmSteersGenerationByClass) {
  const auto dir = scratch_directory("experiments_conditional_lm");
  write_labelled(dir);
  auto config = conditional_config(dir);
  config.trainer.run_directory = (dir / "run").string();
  auto task = make_task(config);
  auto model = task_model(*task);
  EXPECT_EQ(model->heads().condition_classes, 2);
  EXPECT_EQ(model->config().condition_size, 32);
  EXPECT_TRUE(model->config().attention.causal);
  const auto tokenizer = text::load_tokenizer(config.task.tokenizer);
  // Untrained: the classes are not told apart.
  EXPECT_LT(class_share(model, 0, tokenizer, 'a'), 0.8);
  Trainer trainer(*task, config.trainer);
  const auto before = trainer.evaluate();
  const auto after = trainer.train().last_metrics;
  EXPECT_LT(after.at("perplexity"), before.at("perplexity") * 0.5);
  // Labels sort: poems = 0 (a-words), proverbs = 1 (b-words).
  EXPECT_GT(class_share(model, 0, tokenizer, 'a'), 0.8);
  EXPECT_GT(class_share(model, 1, tokenizer, 'b'), 0.8);
  // The checkpoint names the classes and reloads with its condition embedding.
  const auto checkpoint = fs::path(io::resolve_model_path(config.trainer.run_directory));
  const auto folder = fs::is_directory(checkpoint) ? checkpoint : checkpoint.parent_path();
  std::ifstream labels(folder / kConditionLabelsFile);
  std::string text((std::istreambuf_iterator<char>(labels)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "poems\nproverbs\n");
  auto loaded = io::load_model(config.trainer.run_directory);
  EXPECT_EQ(loaded.heads.condition_classes, 2);
  EXPECT_EQ(loaded.config.condition_size, 32);
}

TEST(ModelExperiments, ConditionalLmBadLinesNameFileAndLine) {
  const auto dir = scratch_directory("experiments_conditional_lm_errors");
  write_labelled(dir);
  write_bytes(dir / "bad_train.tsv", "a1 a2\tpoems\nb1 b2 no label here\n");
  write_bytes(dir / "bad_val.tsv", "a1 a2\tpoems\n");
  auto config = conditional_config(dir);
  config.task.data = (dir / "bad_train.tsv").string();
  const auto message = error_of([&] { make_task(config); });
  EXPECT_EQ(message.rfind((dir / "bad_train.tsv").string() + ":2:", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // A validation label the training file lacks.
  write_bytes(dir / "odd_train.tsv", "a1 a2\tpoems\n");
  write_bytes(dir / "odd_val.tsv", "a1 a2\tpoems\nb1\tjokes\n");
  config.task.data = (dir / "odd_train.tsv").string();
  const auto odd = error_of([&] { make_task(config); });
  EXPECT_EQ(odd.rfind((dir / "odd_val.tsv").string() + ":2:", 0), 0u) << odd;
  config.task.data.clear();
  EXPECT_EQ(error_of([&] { make_task(config); }),
            "task 'conditional-lm' needs task.data (the labelled training file: TSV text<TAB>label or JSONL)");
}

}  // namespace
}  // namespace attnkit::train
