// Attention transfer (MultiHeadAttentionImpl::set_transfer_teacher; issue 45, stage 1): a model
// converted from softmax to a trained feature map, with the softmax spec as every layer's teacher,
// computes exactly the teacher model's outputs, and training only the feature maps on the summed
// per-layer transfer losses lowers them (with margin, on any machine).
#include "attnkit/error.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/transformer_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace {

using attnkit::layers::AttentionSpec;
using attnkit::models::ModelInputs;
using attnkit::models::TransformerConfig;
using attnkit::models::TransformerModel;

TransformerConfig causal_config(const std::string& kind) {
  auto config = TransformerConfig::bert(40, 32, 2, 4, 64);
  config.attention = AttentionSpec::parse(kind);
  config.attention.causal = true;
  config.dropout = 0.0;
  return config;
}

// The student: the teacher's weights, its own feature maps.
TransformerModel student_of(TransformerModel& teacher, const std::string& kind) {
  TransformerModel student(causal_config(kind));
  torch::NoGradGuard no_grad;
  auto from = teacher->named_parameters();
  for (auto& p : student->named_parameters())
    if (from.contains(p.key())) p.value().copy_(from[p.key()]);
  return student;
}

TEST(AttentionTransfer, ReturnsTheTeachersOutputsAndLowersTheTransferLoss) {
  for (const std::string kind : {"linear:t2r", "linear:hedgehog"}) {
    SCOPED_TRACE(kind);
    torch::manual_seed(7);
    TransformerModel teacher(causal_config("softmax"));
    teacher->eval();
    TransformerModel student = student_of(teacher, kind);
    student->eval();
    const AttentionSpec softmax = causal_config("softmax").attention;
    for (int64_t l = 0; l < student->block_count(); ++l)
      student->attention(l)->set_transfer_teacher(softmax);
    ModelInputs in;
    in.input_ids = torch::randint(40, {4, 24}, torch::kLong);
    const at::Tensor expected = teacher->forward(in).last_hidden_state;
    EXPECT_TRUE(torch::allclose(student->forward(in).last_hidden_state, expected, 1e-5, 1e-6));

    std::vector<at::Tensor> maps;
    for (auto& p : student->named_parameters()) {
      const bool map = p.key().find("feature_map_") != std::string::npos;
      p.value().set_requires_grad(map);
      if (map) maps.push_back(p.value());
    }
    ASSERT_EQ(maps.size(), 4u);  // weight and bias of 2 layers
    torch::optim::Adam adam(maps, torch::optim::AdamOptions(3e-2));
    auto total_loss = [&] {
      student->forward(in);
      at::Tensor loss = torch::zeros({});
      for (int64_t l = 0; l < student->block_count(); ++l) {
        const at::Tensor& part = student->attention(l)->transfer_loss();
        EXPECT_TRUE(part.defined());
        loss = loss + part;
      }
      return loss;
    };
    const double before = total_loss().item<double>();
    for (int step = 0; step < 60; ++step) {
      adam.zero_grad();
      total_loss().backward();
      adam.step();
    }
    const double after = total_loss().item<double>();
    EXPECT_LT(after, 0.5 * before) << "before " << before << " after " << after;
    // Still the teacher's outputs: the maps changed, what the layers return did not.
    EXPECT_TRUE(torch::allclose(student->forward(in).last_hidden_state, expected, 1e-5, 1e-6));
    // Off again: the student's own attention, as a model of its weights that never transferred
    // computes it (the trained maps are close to the teacher, not equal).
    for (int64_t l = 0; l < student->block_count(); ++l) student->attention(l)->set_transfer_teacher(c10::nullopt);
    EXPECT_FALSE(student->attention(0)->transferring());
    TransformerModel own(causal_config(kind));
    own->eval();
    {
      torch::NoGradGuard no_grad;
      auto trained = student->named_parameters();
      for (auto& p : own->named_parameters()) p.value().copy_(trained[p.key()]);
    }
    const at::Tensor off = student->forward(in).last_hidden_state;
    EXPECT_TRUE(torch::allclose(off, own->forward(in).last_hidden_state, 1e-6, 1e-7));
    EXPECT_GT((off - expected).abs().max().item<double>(), 1e-7);
  }
}

TEST(AttentionTransfer, TeacherMustBeSoftmaxAndStudentNotALogitKind) {
  TransformerModel linear(causal_config("linear:t2r"));
  EXPECT_THROW(linear->attention(0)->set_transfer_teacher(AttentionSpec::parse("cosformer")),
               attnkit::Error);
  TransformerModel softmax(causal_config("softmax"));
  EXPECT_THROW(softmax->attention(0)->set_transfer_teacher(AttentionSpec::parse("softmax")),
               attnkit::Error);
}

}  // namespace
