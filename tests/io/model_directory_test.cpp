// attnkit model directories (io/model_directory.h): save + load keeps what the model computes
// with, buffers included — synthesizer-random-fixed's alignment is drawn at random, not
// recomputed from the config, so a directory without it would load another model.
#include "attnkit/io/model_directory.h"
#include "attnkit/io/safetensors.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace attnkit {
namespace {

TEST(ModelDirectory, FixedRandomSynthesizerRoundTripsWithItsAlignment) {
  const auto dir = testing::scratch_directory("io") / "model";
  torch::manual_seed(12);
  auto config = models::TransformerConfig::bert(40, 16, 2, 2, 32);
  config.attention = layers::AttentionSpec::parse("synthesizer-random-fixed");
  config.attention.max_length = 10;
  models::HeadsConfig heads;
  heads.masked_lm = true;
  models::TaskModel model(config, heads);
  model->eval();
  models::TaskInputs in;
  in.input_ids = torch::randint(40, {2, 8}, torch::kLong);
  const auto expected = model->forward(in).masked_lm_logits;
  io::save_attnkit_model(model, dir.string());
  EXPECT_TRUE(io::SafetensorsFile::open((dir / "model.safetensors").string())
                  .contains("transformer.blocks.1.attention.fixed_random_logits"));

  torch::manual_seed(99);  // a fresh model would draw another alignment
  auto loaded = io::load_model(dir.string());
  EXPECT_EQ(loaded.config.attention.to_string(), "synthesizer-random-fixed");
  const std::string name = "transformer.blocks.0.attention.fixed_random_logits";
  EXPECT_TRUE(torch::equal(loaded.task->named_buffers()[name], model->named_buffers()[name]));
  EXPECT_TRUE(torch::equal(loaded.task->forward(in).masked_lm_logits, expected));
}

}  // namespace
}  // namespace attnkit
