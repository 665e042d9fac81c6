// Linearizing a trained softmax model (analysis/linearize.h, `attnkit linearize`; issue 45): the
// layers chosen (sites, layers, or all but the K most important of a hand-written heads.json),
// the student (every teacher tensor copied, the converted layers of the new kind, its transfer
// mode giving exactly the teacher's outputs, with and without rotary positions), and stage 1
// (the held-out transfer loss of a trained map falls; a fixed map is measured only).
#include "attnkit/analysis/linearize.h"
#include "attnkit/error.h"
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/task_model.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using namespace attnkit;
using analysis::LayerSite;
using attnkit::testing::error_of;

std::shared_ptr<models::TaskModelImpl> teacher_lm(int64_t layers, bool rotary = false) {
  auto c = models::TransformerConfig::gpt2(31, 16, layers, 2);
  c.dropout = 0.0;
  c.max_positions = 32;
  if (rotary) {
    c.positions = layers::PositionEncoding::None;
    ops::RotaryConfig r;
    r.head_dim = 8;
    c.rotary = r;
  }
  models::HeadsConfig h;
  h.causal_lm = true;
  torch::manual_seed(11);
  auto model = std::make_shared<models::TaskModelImpl>(c, h);
  model->eval();
  return model;
}

std::vector<std::string> names(const std::vector<LayerSite>& layers) {
  std::vector<std::string> out;
  for (const auto& l : layers) out.push_back(l.site + ":" + std::to_string(l.layer));
  return out;
}

TEST(Linearize, KindMustBeLinearFamily) {
  for (const char* kind : {"cosformer", "linear:elu", "linear:relu", "linear:t2r:8", "linear:hedgehog"})
    EXPECT_NO_THROW(analysis::linear_family_kind(kind)) << kind;
  for (const char* kind : {"softmax", "talking-heads", "synthesizer-dense"}) {
    const std::string e = error_of([&] { analysis::linear_family_kind(kind); });
    EXPECT_NE(e.find("not a linear-family kind"), std::string::npos) << e;
  }
}

TEST(Linearize, LayersBySiteAndIndex) {
  auto model = teacher_lm(3);
  EXPECT_EQ(names(analysis::layers_to_convert(*model, {}, {})),
            (std::vector<std::string>{"decoder.self:0", "decoder.self:1", "decoder.self:2"}));
  EXPECT_EQ(names(analysis::layers_to_convert(*model, {"decoder.self"}, {2, 0})),
            (std::vector<std::string>{"decoder.self:0", "decoder.self:2"}));
  EXPECT_NE(error_of([&] { analysis::layers_to_convert(*model, {"decoder.cross"}, {}); }).find("decoder.cross"),
            std::string::npos);
  EXPECT_NE(error_of([&] { analysis::layers_to_convert(*model, {}, {3}); }).find("layer 3 outside [0, 3)"),
            std::string::npos);
}

TEST(Linearize, KeepSoftmaxKeepsTheMostImportantLayers) {
  auto model = teacher_lm(4);
  const auto dir = attnkit::testing::scratch_directory("linearize");
  // Summed importance per layer: 0.3, 0.9, 0.1, 0.7.
  const std::string heads = attnkit::testing::write_bytes(
      dir / "heads.json",
      R"({"sites": [{"name": "decoder.self", "layers": 4, "first_row": 0}],
          "importance": {"importance": [[0.1, 0.2], [0.9, 0.0], [0.05, 0.05], [0.3, 0.4]]}})");
  EXPECT_EQ(names(analysis::layers_to_convert(*model, {}, {}, 2, heads)),
            (std::vector<std::string>{"decoder.self:0", "decoder.self:2"}));
  EXPECT_EQ(names(analysis::layers_to_convert(*model, {}, {}, 1, heads)),
            (std::vector<std::string>{"decoder.self:0", "decoder.self:2", "decoder.self:3"}));
  EXPECT_EQ(analysis::layers_to_convert(*model, {}, {}, 0, heads).size(), 4u);
  EXPECT_TRUE(analysis::layers_to_convert(*model, {}, {}, 4, heads).empty());
  EXPECT_NE(error_of([&] { analysis::layers_to_convert(*model, {}, {}, 5, heads); }).find("have 4 layers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { analysis::layers_to_convert(*model, {}, {1}, 2, heads); }).find("not both"),
            std::string::npos);
  // Another model's importance, and a file that is not a heads.json: one-line errors.
  const std::string other = attnkit::testing::write_bytes(
      dir / "other.json",
      R"({"sites": [{"name": "decoder.self", "layers": 2, "first_row": 0}],
          "importance": {"importance": [[0.1, 0.2], [0.9, 0.0]]}})");
  std::string e = error_of([&] { analysis::layers_to_convert(*model, {}, {}, 1, other); });
  EXPECT_NE(e.find("has 2 layers there, 4 in the model"), std::string::npos) << e;
  const std::string junk = attnkit::testing::write_bytes(dir / "junk.json", R"({"sites": []})");
  e = error_of([&] { analysis::layers_to_convert(*model, {}, {}, 1, junk); });
  EXPECT_NE(e.find("not a heads.json"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(Linearize, StudentCopiesTheTeacherAndTransfersItsOutputs) {
  for (const bool rotary : {false, true}) {
    SCOPED_TRACE(rotary ? "rotary" : "learned positions");
    auto teacher = teacher_lm(3, rotary);
    auto student = analysis::make_student(*teacher, {{"decoder.self", 0}, {"decoder.self", 2}},
                                          analysis::linear_family_kind("linear:hedgehog:4"));
    auto& s = student.model->task_model("test");
    EXPECT_EQ(s.transformer->attention(0)->options().spec().to_string(), "linear:hedgehog:4");
    EXPECT_EQ(s.transformer->attention(1)->options().spec().to_string(), "softmax");
    EXPECT_EQ(s.transformer->attention(2)->options().spec().to_string(), "linear:hedgehog:4");
    EXPECT_TRUE(s.transformer->attention(2)->options().spec().causal);
    EXPECT_EQ(student.feature_maps.size(), 4u);  // weight and bias of 2 layers
    const auto from = teacher->named_parameters(true);
    int64_t copied = 0;
    for (const auto& p : s.named_parameters(true)) {
      if (p.key().find("feature_map_") != std::string::npos) {
        EXPECT_EQ(from.find(p.key()), nullptr);
        continue;
      }
      ASSERT_NE(from.find(p.key()), nullptr) << p.key();
      EXPECT_TRUE(torch::equal(p.value(), from[p.key()])) << p.key();
      ++copied;
    }
    EXPECT_EQ(copied, int64_t(from.size()));

    models::TaskInputs in;
    in.input_ids = torch::randint(31, {3, 14}, torch::kLong);
    const at::Tensor expected = teacher->forward(in).causal_lm_logits;
    const at::Tensor own = s.forward(in).causal_lm_logits;
    EXPECT_GT((own - expected).abs().max().item<double>(), 1e-7);  // a tiny random model: close, not equal
    for (auto& c : student.layers) c.attention->set_transfer_teacher(c.teacher);
    EXPECT_TRUE(torch::allclose(s.forward(in).causal_lm_logits, expected, 1e-5, 1e-6));
    for (auto& c : student.layers) c.attention->set_transfer_teacher(c10::nullopt);
    EXPECT_TRUE(torch::equal(s.forward(in).causal_lm_logits, own));
  }
}

TEST(Linearize, StudentRefusesALayerThatIsNotSoftmax) {
  auto teacher = teacher_lm(2);
  auto student = analysis::make_student(*teacher, {{"decoder.self", 1}}, analysis::linear_family_kind("cosformer"));
  const std::string e = error_of(
      [&] { analysis::make_student(*student.model, {{"decoder.self", 1}}, analysis::linear_family_kind("linear:elu")); });
  EXPECT_NE(e.find("decoder.self layer 1 is 'cosformer', not plain softmax"), std::string::npos) << e;
}

TEST(Linearize, StageOneLowersTheHeldOutTransferLoss) {
  auto teacher = teacher_lm(2);
  torch::manual_seed(2);
  analysis::HeadsInputs data;
  data.input_ids = torch::randint(31, {40, 16}, torch::kLong);
  const auto train = analysis::input_rows(data, 0, 36), held_out = analysis::input_rows(data, 36, 40);
  EXPECT_EQ(analysis::input_row_count(train), 36);
  EXPECT_EQ(analysis::input_row_count(held_out), 4);
  const std::vector<LayerSite> all = {{"decoder.self", 0}, {"decoder.self", 1}};

  auto hedgehog = analysis::make_student(*teacher, all, analysis::linear_family_kind("linear:hedgehog"));
  analysis::TransferOptions o;
  o.steps = 60;
  o.log_every = 20;
  o.lr = 3e-2;
  int64_t logged = 0;
  o.on_log = [&](int64_t, const std::vector<double>& losses) {
    EXPECT_EQ(losses.size(), 2u);
    ++logged;
  };
  const auto r = analysis::attention_transfer(hedgehog, train, held_out, o);
  EXPECT_TRUE(r.trained);
  EXPECT_EQ(logged, 4);  // steps 1, 20, 40, 60
  ASSERT_EQ(r.curves.size(), 2u);
  EXPECT_EQ(r.curves[0].size(), 4u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_LT(r.final[i], 0.5 * r.initial[i]) << "layer " << i << ": " << r.initial[i] << " -> " << r.final[i];
  for (const auto& c : hedgehog.layers) EXPECT_FALSE(c.attention->transferring());
  for (const auto& p : hedgehog.model->module().parameters()) EXPECT_TRUE(p.requires_grad());
  const nlohmann::json j = analysis::to_json(hedgehog, r);
  EXPECT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][1]["site"], "decoder.self");
  EXPECT_EQ(j["layers"][1]["teacher"], "softmax");
  EXPECT_EQ(j["total"]["curve"].size(), 4u);
  EXPECT_DOUBLE_EQ(j["total"]["final"].get<double>(), r.final[0] + r.final[1]);

  // A fixed map: measured once, nothing trained.
  auto cosformer = analysis::make_student(*teacher, all, analysis::linear_family_kind("cosformer"));
  const auto fixed = analysis::attention_transfer(cosformer, train, held_out, o);
  EXPECT_FALSE(fixed.trained);
  EXPECT_TRUE(fixed.curves[0].empty());
  EXPECT_GT(fixed.initial[0], 0.0);
  EXPECT_EQ(fixed.initial, fixed.final);
}

// An encoder-decoder's sites: encoder self attention and cross attention converted (padded
// sources), the decoder's self attention left softmax; transfer mode gives the teacher's logits,
// and stage 1 lowers both layers' held-out losses.
TEST(Linearize, EncoderDecoderSites) {
  auto config = models::EncoderDecoderConfig::transformer(29, 29, 16, 2, 2, 32);
  config.encoder.dropout = config.decoder.dropout = 0.0;
  torch::manual_seed(4);
  auto teacher = std::make_shared<models::EncoderDecoderModelImpl>(config);
  teacher->eval();
  const auto convert = analysis::layers_to_convert(*teacher, {"encoder.self", "decoder.cross"}, {1});
  EXPECT_EQ(names(convert), (std::vector<std::string>{"encoder.self:1", "decoder.cross:1"}));
  // cosFormer cross attention has no cached form: a student that could not decode is refused.
  const std::string cos_cross =
      error_of([&] { analysis::make_student(*teacher, convert, analysis::linear_family_kind("cosformer")); });
  EXPECT_NE(cos_cross.find("cosFormer cross attention has no cached form"), std::string::npos) << cos_cross;
  auto student = analysis::make_student(*teacher, convert, analysis::linear_family_kind("linear:hedgehog"));
  auto& s = student.model->encoder_decoder("test");
  EXPECT_EQ(s.encoder->attention(0)->options().spec().to_string(), "softmax");
  EXPECT_EQ(s.encoder->attention(1)->options().spec().to_string(), "linear:hedgehog");
  EXPECT_EQ(s.decoder->attention(1)->options().spec().to_string(), "softmax");
  EXPECT_EQ(s.decoder->attention(1, models::AttentionSite::Cross)->options().spec().to_string(), "linear:hedgehog");
  EXPECT_FALSE(s.decoder->attention(1, models::AttentionSite::Cross)->options().spec().causal);

  analysis::HeadsInputs data;
  auto& t = data.translation;
  t.source_ids = torch::randint(1, 29, {24, 7}, torch::kLong);
  t.source_mask = torch::ones({24, 7}, torch::kLong);
  t.source_mask.slice(0, 0, 12).slice(1, 5, 7).zero_();  // half the sources padded by 2
  t.decoder_input_ids = torch::randint(1, 29, {24, 6}, torch::kLong);
  t.decoder_mask = torch::ones({24, 6}, torch::kLong);
  t.labels = torch::randint(1, 29, {24, 6}, torch::kLong);
  const at::Tensor expected = teacher->forward(t.source_ids, t.decoder_input_ids, t.source_mask, t.decoder_mask);
  for (auto& c : student.layers) c.attention->set_transfer_teacher(c.teacher);
  EXPECT_TRUE(torch::allclose(s.forward(t.source_ids, t.decoder_input_ids, t.source_mask, t.decoder_mask), expected,
                              1e-5, 1e-6));
  for (auto& c : student.layers) c.attention->set_transfer_teacher(c10::nullopt);

  analysis::TransferOptions o;
  o.steps = 40;
  o.lr = 3e-2;
  const auto r = analysis::attention_transfer(student, analysis::input_rows(data, 0, 20),
                                              analysis::input_rows(data, 20, 24), o);
  EXPECT_EQ(r.train_examples, 20);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_LT(r.final[i], 0.7 * r.initial[i]) << "layer " << i << ": " << r.initial[i] << " -> " << r.final[i];
}

}  // namespace
