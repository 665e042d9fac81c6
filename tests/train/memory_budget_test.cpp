// The memory refusal of training runs (memory_budget.h): the parameter estimate matches the built
// models, the budget reads MemAvailable and cgroup v1/v2 limits (from fake /proc and /sys trees),
// and make_task refuses a model that cannot fit in one line naming its settings, before building
// anything.
#include "attnkit/error.h"
#include "attnkit/models/transformer_model.h"
#include "attnkit/models/task_model.h"
#include "attnkit/train/memory_budget.h"
#include "attnkit/train/run_config.h"
#include "attnkit/train/tasks.h"
#include "support/test_files.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace attnkit::train {
namespace {

using attnkit::testing::error_of;
using attnkit::testing::scratch_directory;
namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

struct Case {
  const char* family;
  const char* attention;
  models::HeadsConfig heads;
};

TEST(MemoryBudget, EstimateMatchesBuiltModels) {
  models::HeadsConfig mlm, lm, classify, tag;
  mlm.masked_lm = true;
  lm.causal_lm = true;
  models::HeadsConfig two_stream = lm;  // plm's XLNet query stream: one start vector more
  two_stream.query_stream = true;
  classify.sequence_labels = 3;
  classify.sequence_pooling = models::Pooling::Mean;
  tag.token_labels = 5;
  tag.span = true;
  for (const auto& [family, attention, heads] :
       {Case{"bert", "softmax", mlm}, Case{"gpt2", "softmax", lm}, Case{"albert", "softmax", mlm},
        Case{"bert", "linear:elu", classify}, Case{"bert", "cosformer", tag},
        Case{"bert", "synthesizer-random", classify}, Case{"bert", "synthesizer-dense", classify},
        Case{"bert", "talking-heads", tag}, Case{"gpt2", "softmax", two_stream}}) {
    SCOPED_TRACE(std::string(family) + " " + attention);
    auto c = models::preset(family, {500, 64, 2, 4, 0, std::string(family) == "albert" ? 16 : 0});
    c.attention = layers::AttentionSpec::parse(attention);
    c.attention.max_length = c.max_positions = 64;
    c.pooler = true;
    models::TaskModel model(c, heads);
    const double built = static_cast<double>(models::parameter_count(*model));
    const double estimate = parameters_estimate(c, heads);
    // Q and K are counted for every kind (some synthesizers have neither): at most 2 blocks x
    // (2 x 64² + 2 x 64) too many.
    EXPECT_NEAR(estimate, built, std::string(attention).rfind("synthesizer", 0) == 0 ? 2 * (2 * 64 * 64 + 2 * 64) + 0.5 : 0.5);
    EXPECT_GE(estimate, built);
  }
}

// An encoder-decoder (the translation task's model): both stacks, cross attention, shared or
// separate embeddings, tied output.
TEST(MemoryBudget, EstimateMatchesEncoderDecoders) {
  for (const bool share : {true, false}) {
    SCOPED_TRACE(share ? "shared embeddings" : "separate embeddings");
    auto c = models::EncoderDecoderConfig::transformer(300, 300, 32, 2, 4, 64);
    c.share_embeddings = share;
    c.encoder.max_positions = c.decoder.max_positions = 40;
    models::EncoderDecoderModel model(c);
    EXPECT_NEAR(parameters_estimate(c), static_cast<double>(models::parameter_count(*model)), 0.5);
  }
}

// model.key_size / model.value_size: the estimate stays exact for per-head widths other than
// hidden / heads (queries and keys of key_size, values and head contexts of value_size).
TEST(MemoryBudget, EstimateFollowsKeyAndValueSizes) {
  models::HeadsConfig mlm, lm;
  mlm.masked_lm = true;
  lm.causal_lm = true;
  for (const auto& [family, attention, heads] :
       {Case{"bert", "softmax", mlm}, Case{"gpt2", "softmax", lm}, Case{"albert", "softmax", mlm},
        Case{"bert", "cosformer", mlm}, Case{"bert", "talking-heads", mlm}}) {
    for (const auto& [key, value] : {std::pair<int64_t, int64_t>{12, 0}, {0, 40}, {3, 33}, {64, 64}}) {
      SCOPED_TRACE(fmt::format("{} {} key {} value {}", family, attention, key, value));
      auto c = models::preset(family, {500, 64, 2, 4, 0, std::string(family) == "albert" ? 16 : 0});
      c.attention = layers::AttentionSpec::parse(attention);
      c.attention.key_size = key;
      c.attention.value_size = value;
      c.attention.max_length = c.max_positions = 64;
      models::TaskModel model(c, heads);
      EXPECT_EQ(parameters_estimate(c, heads), static_cast<double>(models::parameter_count(*model)));
    }
  }
}

TEST(MemoryBudget, CopiesFollowTheOptimiser) {
  TrainerOptions o;
  EXPECT_EQ(training_copies(o), 4);  // AdamW: weights, gradients, two moments
  o.ema_decay = 0.99;
  EXPECT_EQ(training_copies(o), 5);
  o.ema_decay = 0;
  o.optimizer.kind = OptimizerKind::kSgd;
  EXPECT_EQ(training_copies(o), 3);
  o.optimizer.momentum = 0;
  EXPECT_EQ(training_copies(o), 2);
}

TEST(MemoryBudget, ReadsMemAvailableAndCgroupLimits) {
  const auto root = scratch_directory("memory_budget");
  write(root / "proc/meminfo", "MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n");
  write(root / "proc/self/cgroup", "0::/\n");
  auto budget = memory_budget(root.string());
  ASSERT_TRUE(budget);
  EXPECT_EQ(budget->bytes, 20000000.0 * 1024);
  EXPECT_EQ(budget->source, "MemAvailable");

  // cgroup v2: the process's group has no limit ("max"), its parent 8 GB with 2 GB in use.
  write(root / "proc/self/cgroup", "0::/jobs/run1\n");
  write(root / "sys/fs/cgroup/jobs/run1/memory.max", "max\n");
  write(root / "sys/fs/cgroup/jobs/run1/memory.current", "1000\n");
  write(root / "sys/fs/cgroup/jobs/memory.max", "8000000000\n");
  write(root / "sys/fs/cgroup/jobs/memory.current", "2000000000\n");
  budget = memory_budget(root.string());
  ASSERT_TRUE(budget);
  EXPECT_EQ(budget->bytes, 6e9);
  EXPECT_EQ(budget->source, "the cgroup limit of 8.00 GB less 2.00 GB in use");
  // Page cache counts in memory.current but is reclaimed before an allocation fails: it is not "in use".
  write(root / "sys/fs/cgroup/jobs/memory.stat", "anon 500000000\nfile 1500000000\nkernel 1000\n");
  budget = memory_budget(root.string());
  ASSERT_TRUE(budget);
  EXPECT_EQ(budget->bytes, 7.5e9);
  EXPECT_EQ(budget->source, "the cgroup limit of 8.00 GB less 500 MB in use");

  // cgroup v1: "no limit" is a number near 2^63, so MemAvailable stays; a real limit wins.
  fs::remove_all(root / "sys");
  write(root / "proc/self/cgroup", "5:devices:/\n4:memory:/box\n0::/\n");
  write(root / "sys/fs/cgroup/memory/box/memory.limit_in_bytes", "9223372036854771712\n");
  write(root / "sys/fs/cgroup/memory/box/memory.usage_in_bytes", "5\n");
  EXPECT_EQ(memory_budget(root.string())->source, "MemAvailable");
  write(root / "sys/fs/cgroup/memory/box/memory.limit_in_bytes", "3000000000\n");
  write(root / "sys/fs/cgroup/memory/box/memory.usage_in_bytes", "500000000\n");
  EXPECT_EQ(memory_budget(root.string())->bytes, 2.5e9);
  write(root / "sys/fs/cgroup/memory/box/memory.stat", "cache 1\ntotal_cache 400000000\n");
  EXPECT_EQ(memory_budget(root.string())->bytes, 2.9e9);

  fs::remove_all(root);
  EXPECT_FALSE(memory_budget(root.string()));
  EXPECT_TRUE(memory_budget());  // this machine's /proc/meminfo
}

TEST(MemoryBudget, RefusalIsOneLineWithEstimateAndLimit) {
  auto c = models::preset("bert", {1000, 64, 2, 4, 0, 0});
  models::HeadsConfig heads;
  heads.masked_lm = true;
  TrainerOptions o;
  const double bytes = parameters_estimate(c, heads) * 16;
  EXPECT_NO_THROW(check_training_memory(c, heads, o, "x", MemoryBudget{bytes * 1.01, "test"}));
  EXPECT_NO_THROW(check_training_memory(c, heads, o, "x", std::nullopt));
  const auto message = error_of([&] {
    check_training_memory(c, heads, o, "model.layers = 2", MemoryBudget{bytes * 0.5, "MemAvailable"});
  });
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind("model.layers = 2: training needs about " + format_bytes(bytes), 0), 0u) << message;
  EXPECT_NE(message.find("x 4 float32 copies"), std::string::npos) << message;
  EXPECT_NE(message.find("more than the " + format_bytes(bytes * 0.5) + " this process may use (MemAvailable)"),
            std::string::npos)
      << message;
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1.5e9), "1.50 GB");
  EXPECT_EQ(format_bytes(3.16e11), "316 GB");
}

RunConfig copy_task() {
  RunConfig c;
  c.task.name = "copy";
  c.task.train_examples = 16;
  c.task.eval_examples = 4;
  c.trainer.quiet = true;
  return c;
}

// The three commands in process: each is refused fast, naming its settings. Sizes far
// beyond any machine (10^11 layers: 2·10^16 parameters; hidden 10^9: 5·10^19), so the refusal
// does not depend on this machine's memory.
TEST(MemoryBudget, MakeTaskRefusesModelsThatCannotFit) {
  for (const auto& [layers, hidden, named] :
       {std::tuple<int64_t, int64_t, const char*>{100000000000, 128, "model.layers = 100000000000"},
        {4, 1000000000, "model.hidden = 1000000000"},
        {4, int64_t{1} << 41, "model.hidden: 2199023255552 is larger than 2^40"}}) {
    auto config = copy_task();
    config.model.layers = layers;
    config.model.hidden = hidden;
    config.model.heads = 4;
    const auto start = std::chrono::steady_clock::now();
    const auto message = error_of([&] { make_task(config); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 5.0);
    EXPECT_NE(message.find(named), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    if (hidden < (int64_t{1} << 40)) EXPECT_NE(message.find("this process may use"), std::string::npos) << message;
  }
  // A small model still builds.
  auto config = copy_task();
  config.model.hidden = 16;
  config.model.layers = 1;
  config.model.heads = 2;
  EXPECT_NO_THROW(make_task(config));
}

}  // namespace
}  // namespace attnkit::train
