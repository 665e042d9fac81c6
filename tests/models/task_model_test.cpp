// Task heads and the encoder-decoder model: every head runs forward and backward on a tiny batch,
// the losses mean what they say, UniLM batches predict only the target, the conditional LM's
// class embedding feeds Conditional LayerNorm, and the encoder-decoder is causal on the target
// side and depends on the source through cross attention.
#include "attnkit/error.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace {

using attnkit::layers::AttentionSpec;
using attnkit::models::EncoderDecoderConfig;
using attnkit::models::EncoderDecoderModel;
using attnkit::models::HeadsConfig;
using attnkit::models::kIgnoreLabel;
using attnkit::models::Pooling;
using attnkit::models::TaskInputs;
using attnkit::models::TaskModel;
using attnkit::models::TransformerConfig;
using attnkit::models::unilm_batch;

constexpr int64_t kVocab = 40;

TaskInputs inputs(int64_t batch, int64_t n) {
  TaskInputs in;
  in.input_ids = torch::randint(1, kVocab, {batch, n}, torch::kLong);
  in.attention_mask = torch::ones({batch, n}, torch::kLong);
  if (batch > 1) in.attention_mask->index_put_({1, torch::indexing::Slice(n - 2)}, 0);  // row 1 padded
  return in;
}

// Sum of |grad| over the parameters whose name starts with `prefix`.
double gradient_mass(torch::nn::Module& model, const std::string& prefix) {
  double total = 0;
  for (const auto& p : model.named_parameters())
    if (p.key().rfind(prefix, 0) == 0 && p.value().grad().defined())
      total += p.value().grad().abs().sum().item<double>();
  return total;
}

TEST(TaskModel, EveryHeadRunsForwardAndBackward) {
  torch::manual_seed(3);
  HeadsConfig heads;
  heads.masked_lm = true;
  heads.next_sentence = 2;
  heads.sequence_labels = 3;
  heads.token_labels = 5;
  heads.span = true;
  TaskModel model(TransformerConfig::bert(kVocab, 16, 2, 4, 32), heads);
  auto in = inputs(2, 9);
  auto out = model->forward(in);
  EXPECT_EQ(out.masked_lm_logits.sizes(), (std::vector<int64_t>{2, 9, kVocab}));
  EXPECT_EQ(out.next_sentence_logits.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(out.sequence_logits.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out.token_logits.sizes(), (std::vector<int64_t>{2, 9, 5}));
  EXPECT_EQ(out.start_logits.sizes(), (std::vector<int64_t>{2, 9}));
  auto loss = attnkit::models::cross_entropy(out.masked_lm_logits, in.input_ids) +
              attnkit::models::cross_entropy(out.next_sentence_logits, torch::tensor({0, 1})) +
              attnkit::models::cross_entropy(out.sequence_logits, torch::tensor({2, 0})) +
              attnkit::models::cross_entropy(out.token_logits, torch::randint(5, {2, 9})) +
              attnkit::models::span_loss(out.start_logits, out.end_logits, torch::tensor({1, 2}),
                                         torch::tensor({3, 4}));
  loss.backward();
  for (const char* head : {"masked_lm.", "next_sentence.", "classifier.", "tagger.", "span.",
                           "transformer.blocks.0."})
    EXPECT_GT(gradient_mass(*model, head), 0.0) << head;
  // The MLM decoder is tied: the word embeddings get gradient from it.
  EXPECT_GT(gradient_mass(*model, "transformer.embeddings.token."), 0.0);
}

TEST(TaskModel, CausalLmTiedAndUntied) {
  torch::manual_seed(4);
  HeadsConfig heads;
  heads.causal_lm = true;
  TaskModel tied(TransformerConfig::gpt2(kVocab, 16, 2, 4), heads);
  tied->eval();
  auto in = inputs(1, 6);
  in.attention_mask.reset();
  auto out = tied->forward(in);
  auto expected = torch::matmul(out.base.last_hidden_state, tied->transformer->word_embeddings().t());
  EXPECT_TRUE(torch::allclose(out.causal_lm_logits, expected, 1e-6, 1e-6));
  heads.tie_lm = false;
  TaskModel untied(TransformerConfig::gpt2(kVocab, 16, 2, 4), heads);
  EXPECT_TRUE(untied->lm_head.defined());
  EXPECT_EQ(untied->forward(in).causal_lm_logits.sizes(), (std::vector<int64_t>{1, 6, kVocab}));
}

TEST(TaskModel, NextTokenTargetsSkipPaddingAndTheEnd) {
  auto ids = torch::tensor({{5, 6, 7, 8}, {9, 10, 0, 0}});
  auto mask = torch::tensor({{1, 1, 1, 1}, {1, 1, 0, 0}});
  auto t = attnkit::models::next_token_targets(ids, mask);
  auto expected = torch::tensor({{6, 7, 8, -100}, {10, -100, -100, -100}});
  EXPECT_TRUE(torch::equal(t, expected)) << t;
}

TEST(TaskModel, CrossEntropyIgnoresLabelsAndChecksRange) {
  auto logits = torch::randn({2, 3, 4}, torch::kDouble);
  const int ignore = static_cast<int>(kIgnoreLabel);
  auto labels = torch::tensor({{1, ignore, 3}, {0, 2, ignore}}).to(torch::kLong);
  // Mean over the four counted positions, computed by hand.
  auto logp = torch::log_softmax(logits, -1);
  double manual = -(logp[0][0][1] + logp[0][2][3] + logp[1][0][0] + logp[1][1][2]).item<double>() / 4;
  EXPECT_NEAR(attnkit::models::cross_entropy(logits, labels).item<double>(), manual, 1e-12);
  auto none = torch::full({2, 3}, kIgnoreLabel, torch::kLong);
  EXPECT_EQ(attnkit::models::cross_entropy(logits, none).item<double>(), 0.0);
  EXPECT_THROW(attnkit::models::cross_entropy(logits, torch::tensor({{1, 4, 0}, {0, 0, 0}})),
               attnkit::Error);
  EXPECT_THROW(attnkit::models::cross_entropy(logits, torch::zeros({3, 2}, torch::kLong)),
               attnkit::Error);
}

TEST(TaskModel, PoolingChoosesTheRightToken) {
  torch::manual_seed(5);
  HeadsConfig heads;
  heads.sequence_labels = 2;
  heads.sequence_pooling = Pooling::Last;
  heads.sequence_bias = false;
  heads.classifier_dropout = 0;
  TaskModel model(TransformerConfig::gpt2(kVocab, 16, 1, 2), heads);
  model->eval();
  auto in = inputs(2, 7);
  auto out = model->forward(in);
  auto h = out.base.last_hidden_state;
  // Row 0 is unpadded (last token 6), row 1 has 5 real tokens (last token 4).
  auto expected = torch::stack({model->classifier->forward(h[0][6]), model->classifier->forward(h[1][4])});
  EXPECT_TRUE(torch::allclose(out.sequence_logits, expected, 1e-6, 1e-6));
}

TEST(TaskModel, UnilmBatchPredictsOnlyTheTarget) {
  auto b = attnkit::models::unilm_batch({{11, 12, 13}, {14}}, {{21, 22}, {23, 24, 25}}, 1, 2, 0);
  // Row 0: [CLS] 11 12 13 [SEP] 21 22 [SEP]; row 1: [CLS] 14 [SEP] 23 24 25 [SEP] pad.
  EXPECT_TRUE(torch::equal(b.input_ids, torch::tensor({{1, 11, 12, 13, 2, 21, 22, 2},
                                                       {1, 14, 2, 23, 24, 25, 2, 0}})));
  EXPECT_TRUE(torch::equal(b.targets, torch::tensor({{-100, -100, -100, -100, 21, 22, 2, -100},
                                                     {-100, -100, 23, 24, 25, 2, -100, -100}})));
  EXPECT_TRUE(torch::equal(b.attention_mask, torch::tensor({{1, 1, 1, 1, 1, 1, 1, 1},
                                                            {1, 1, 1, 1, 1, 1, 1, 0}})));
  // Source tokens see the whole source and no target; target tokens see the source and the
  // target causally.
  auto m = b.mask[0][0];
  EXPECT_TRUE(m[1][4].item<bool>());
  EXPECT_FALSE(m[1][5].item<bool>());
  EXPECT_TRUE(m[6][5].item<bool>());
  EXPECT_FALSE(m[5][6].item<bool>());
  // A UniLM model's prediction at a target position does not depend on later target tokens.
  torch::manual_seed(6);
  HeadsConfig heads;
  heads.masked_lm = true;
  TaskModel model(TransformerConfig::bert(kVocab, 16, 2, 4, 32), heads);
  model->eval();
  TaskInputs in;
  in.input_ids = b.input_ids;
  in.token_type_ids = b.token_type_ids;
  in.attention_mask = b.attention_mask;
  in.mask = b.mask;
  auto before = model->forward(in).masked_lm_logits;
  in.input_ids = b.input_ids.clone();
  in.input_ids[0][6] = 33;  // change the last target token of row 0
  auto after = model->forward(in).masked_lm_logits;
  EXPECT_TRUE(torch::allclose(before[0].slice(0, 0, 6), after[0].slice(0, 0, 6), 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(before[0][6], after[0][6], 1e-6, 1e-6));
}

TEST(TaskModel, ConditionalLmClassEmbeddingFeedsLayerNorm) {
  torch::manual_seed(7);
  auto config = TransformerConfig::gpt2(kVocab, 16, 2, 4);
  config.condition_size = 8;
  HeadsConfig heads;
  heads.causal_lm = true;
  heads.condition_classes = 3;
  TaskModel model(config, heads);
  model->eval();
  auto in = inputs(2, 5);
  in.attention_mask.reset();
  in.condition_ids = torch::tensor({0, 2});
  // At init the condition layers are zero: Conditional LN is plain LN, classes do not matter.
  auto base = model->forward(in).causal_lm_logits;
  in.condition_ids = torch::tensor({1, 1});
  EXPECT_TRUE(torch::allclose(base, model->forward(in).causal_lm_logits, 1e-6, 1e-6));
  // After training the condition layers, the class changes the prediction.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key().find("condition_to_") != std::string::npos) p.value().normal_(0, 0.5);
  }
  auto one = model->forward(in).causal_lm_logits;
  in.condition_ids = torch::tensor({2, 2});
  EXPECT_FALSE(torch::allclose(one, model->forward(in).causal_lm_logits, 1e-4, 1e-4));
  // Gradients reach the class embedding.
  model->train();
  model->forward(in).causal_lm_logits.sum().backward();
  EXPECT_GT(gradient_mass(*model, "condition_embedding."), 0.0);
}

TEST(TaskModel, BadHeadConfigsAreClearErrors) {
  HeadsConfig heads;
  heads.next_sentence = 2;
  EXPECT_THROW(TaskModel(TransformerConfig::gpt2(kVocab, 16, 1, 2), heads), attnkit::Error);
  heads = {};
  heads.condition_classes = 2;
  EXPECT_THROW(TaskModel(TransformerConfig::bert(kVocab, 16, 1, 2, 32), heads), attnkit::Error);
  heads = {};
  heads.token_labels = -1;
  EXPECT_THROW(TaskModel(TransformerConfig::bert(kVocab, 16, 1, 2, 32), heads), attnkit::Error);
  nlohmann::json j = {{"masked_lm", true}, {"mlm", 1}};
  EXPECT_THROW(j.get<HeadsConfig>(), attnkit::Error);
  HeadsConfig round;
  round.sequence_labels = 4;
  round.sequence_pooling = Pooling::Mean;
  auto back = nlohmann::json(round).get<HeadsConfig>();
  EXPECT_EQ(back.sequence_labels, 4);
  EXPECT_EQ(back.sequence_pooling, Pooling::Mean);
}

// ---------------------------------------------------------------------------------------------

EncoderDecoderConfig small_encoder_decoder(const AttentionSpec& self, const AttentionSpec& cross) {
  auto c = EncoderDecoderConfig::transformer(kVocab, kVocab, 16, 2, 4, 32, self, cross);
  c.encoder.dropout = c.decoder.dropout = 0;
  return c;
}

class EncoderDecoder : public ::testing::TestWithParam<std::string> {};

TEST_P(EncoderDecoder, CausalOnTargetAndReadsTheSource) {
  torch::manual_seed(8);
  const auto spec = AttentionSpec::parse(GetParam());
  EncoderDecoderModel model(small_encoder_decoder(spec, spec));
  model->eval();
  auto source = torch::randint(1, kVocab, {2, 7}, torch::kLong);
  auto target = torch::randint(1, kVocab, {2, 5}, torch::kLong);  // L != S
  auto logits = model->forward(source, target);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 5, kVocab}));
  // Changing target token 3 leaves positions 0..2 unchanged.
  auto changed = target.clone();
  changed[0][3] = (changed[0][3].item<int64_t>() % (kVocab - 1)) + 1;
  auto other = model->forward(source, changed);
  EXPECT_TRUE(torch::allclose(logits.slice(1, 0, 3), other.slice(1, 0, 3), 1e-5, 1e-5));
  // Changing the source changes every target position (cross attention).
  auto source2 = source.clone();
  source2[0][0] = (source2[0][0].item<int64_t>() % (kVocab - 1)) + 1;
  auto moved = model->forward(source2, target);
  EXPECT_GT((moved[0] - logits[0]).abs().amax(-1).min().item<double>(), 0.0);
  // One training step: gradients reach both stacks.
  model->train();
  auto loss = attnkit::models::cross_entropy(model->forward(source, target), target);
  loss.backward();
  EXPECT_GT(gradient_mass(*model, "encoder.blocks."), 0.0);
  EXPECT_GT(gradient_mass(*model, "decoder.blocks.0.cross_attention."), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, EncoderDecoder,
                         ::testing::Values("softmax", "linear:elu", "cosformer"));

TEST(EncoderDecoderModel, SourcePaddingIsIgnoredAndConfigIsChecked) {
  torch::manual_seed(9);
  EncoderDecoderModel model(small_encoder_decoder({}, {}));
  model->eval();
  auto source = torch::randint(1, kVocab, {1, 6}, torch::kLong);
  auto mask = torch::tensor({{1, 1, 1, 1, 0, 0}});
  auto target = torch::randint(1, kVocab, {1, 4}, torch::kLong);
  auto a = model->forward(source, target, mask);
  auto junk = source.clone();
  junk[0][5] = 3;
  junk[0][4] = 7;
  EXPECT_TRUE(torch::allclose(a, model->forward(junk, target, mask), 1e-5, 1e-5));

  auto bad = small_encoder_decoder({}, {});
  bad.decoder.cross_attention = false;
  EXPECT_THROW(EncoderDecoderModel{bad}, attnkit::Error);
  bad = small_encoder_decoder({}, {});
  bad.decoder.attention.causal = false;
  EXPECT_THROW(EncoderDecoderModel{bad}, attnkit::Error);
  auto round = nlohmann::json(small_encoder_decoder({}, {})).get<EncoderDecoderConfig>();
  EXPECT_TRUE(round.decoder.cross_attention);
  EXPECT_TRUE(round.share_embeddings);
}

}  // namespace
