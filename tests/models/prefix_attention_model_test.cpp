// Prefix-LM / UniLM masks carried as prefix lengths through MultiHeadAttention and a BERT-family
// model: linear attention and cosFormer run the O(n) prefix op and equal the same model computed
// by hand with the explicit UniLM mask through the float64 oracles; softmax keeps the explicit
// mask (unchanged outputs) and builds prefix_lm_mask when only the lengths are given.
#include "attnkit/error.h"
#include "attnkit/layers/multi_head_attention.h"
#include "attnkit/models/task_model.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/reference.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace attnkit {
namespace {

using layers::AttentionInputs;
using layers::AttentionKind;
using layers::AttentionSpec;
using layers::MultiHeadAttention;
using layers::MultiHeadAttentionOptions;

at::Tensor heads_of(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, -1}).transpose(1, 2);
}

// Self attention of `mha` over x computed from its projections and the float64 oracle under the
// explicit mask `allowed` [B, 1, n, n] and key padding.
at::Tensor oracle_attention(MultiHeadAttention& mha, const at::Tensor& x, const at::Tensor& allowed,
                            const at::Tensor& keep) {
  const int64_t H = mha->heads();
  auto q = heads_of(mha->q->forward(x), H), k = heads_of(mha->k->forward(x), H),
       v = heads_of(mha->v->forward(x), H);
  const auto& spec = mha->options().spec();
  at::Tensor context =
      spec.kind == AttentionKind::Linear
          ? reference::linear_attention(q, k, v, mha->feature_map(), false, keep, allowed)
          : reference::cosformer_attention(q, k, v, false, keep, allowed);
  context = context.to(x.scalar_type()).transpose(1, 2).reshape({x.size(0), x.size(1), -1});
  return mha->o->forward(context);
}

// A UniLM batch as models::unilm_batch lays it out, of three pairs of different lengths.
models::UnilmBatch example_batch() {
  return models::unilm_batch({{11, 12, 13, 14, 15, 16}, {17}, {18, 19, 20}},
                             {{21, 22}, {23, 24, 25, 26, 27, 28}, {29}}, 1, 2, 0);
}

TEST(PrefixAttentionLayer, FeatureKindsEqualTheOracleUnderTheUnilmMask) {
  torch::manual_seed(2);
  const auto batch = example_batch();
  const int64_t B = batch.input_ids.size(0), n = batch.input_ids.size(1);
  const auto keep = batch.attention_mask.to(at::kBool);
  for (const std::string kind : {"linear:elu", "linear:relu", "cosformer"}) {
    MultiHeadAttention mha(MultiHeadAttentionOptions(12, 3).spec(AttentionSpec::parse(kind)));
    mha->to(torch::kDouble);
    auto x = torch::randn({B, n, 12}, torch::kDouble);
    AttentionInputs in;
    in.key_padding = keep;
    in.prefix_lengths = batch.prefix_lengths;
    auto got = mha->forward(x, in).output;
    auto want = oracle_attention(mha, x, batch.mask, keep);
    EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-12)) << kind;
    // The explicit mask next to the lengths is the caller's promise that they agree: same result.
    in.mask = batch.mask;
    EXPECT_TRUE(torch::allclose(mha->forward(x, in).output, got, 0, 0)) << kind;
    // Explicit weights (analysis) under the same mask reproduce the output.
    in.need_weights = true;
    auto r = mha->forward(x, in);
    auto vh = heads_of(mha->v->forward(x), 3);
    auto ctx = at::matmul(r.weights, vh).transpose(1, 2).reshape({B, n, -1});
    EXPECT_TRUE(torch::allclose(mha->o->forward(ctx), got, 1e-9, 1e-11)) << kind;
  }
}

TEST(PrefixAttentionLayer, SoftmaxKeepsTheExplicitMaskOrBuildsIt) {
  torch::manual_seed(3);
  const auto batch = example_batch();
  const int64_t B = batch.input_ids.size(0), n = batch.input_ids.size(1);
  MultiHeadAttention mha(MultiHeadAttentionOptions(12, 3));
  auto x = torch::randn({B, n, 12});
  AttentionInputs with_mask;
  with_mask.key_padding = batch.attention_mask.to(at::kBool);
  with_mask.mask = batch.mask;
  auto before = mha->forward(x, with_mask).output;
  AttentionInputs both = with_mask;
  both.prefix_lengths = batch.prefix_lengths;
  EXPECT_TRUE(mha->forward(x, both).output.equal(before));
  AttentionInputs lengths_only = both;
  lengths_only.mask = c10::nullopt;
  EXPECT_TRUE(mha->forward(x, lengths_only).output.equal(before));
}

TEST(PrefixAttentionLayer, ErrorsNameTheProblem) {
  MultiHeadAttention mha(
      MultiHeadAttentionOptions(8, 2).spec(AttentionSpec::parse("linear:elu")));
  auto x = torch::randn({2, 5, 8});
  AttentionInputs in;
  in.mask = ops::prefix_lm_mask(2, 5);
  try {
    mha->forward(x, in);
    ADD_FAILURE() << "an arbitrary mask was taken by linear attention";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefix lengths"), std::string::npos) << e.what();
  }
  in.mask = c10::nullopt;
  in.prefix_lengths = torch::tensor({1, 2, 3}, torch::kLong);
  try {
    mha->forward(x, in);
    ADD_FAILURE() << "prefix_lengths of the wrong shape were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefix_lengths must be [2]"), std::string::npos)
        << e.what();
  }
}

// BERT (post-LN) by hand: embeddings, then per block LN(h + attention(h)), LN(h + ffn(h)), with
// the attention from the oracle under the explicit UniLM mask; then the masked-LM head.
at::Tensor bert_by_hand(models::TaskModel& model, const models::UnilmBatch& batch) {
  auto& t = model->transformer;
  at::Tensor h = t->embeddings->forward(batch.input_ids, batch.token_type_ids);
  const auto keep = batch.attention_mask.to(at::kBool);
  for (int64_t layer = 0; layer < t->block_count(); ++layer) {
    auto block = t->block(layer);
    h = block->ln_attention->forward(h + oracle_attention(block->attention, h, batch.mask, keep));
    h = block->ln_ffn->forward(h + block->ffn->forward(h));
  }
  return model->masked_lm->forward(h, t->word_embeddings());
}

TEST(PrefixAttentionModel, UnilmBertWithFeatureKindsEqualsTheExplicitMask) {
  const auto batch = example_batch();
  for (const std::string kind : {"linear:elu", "linear:relu", "cosformer"}) {
    torch::manual_seed(5);
    models::HeadsConfig heads;
    heads.masked_lm = true;
    auto config = models::TransformerConfig::bert(40, 16, 2, 4, 32);
    config.type_vocab_size = 2;
    config.dropout = 0;
    config.attention = AttentionSpec::parse(kind);
    models::TaskModel model(config, heads);
    model->to(torch::kDouble);
    model->eval();
    torch::NoGradGuard no_grad;
    auto got = model->forward(batch.inputs()).masked_lm_logits;
    auto want = bert_by_hand(model, batch);
    // Padded positions too: both see the real keys up to themselves.
    EXPECT_TRUE(torch::allclose(got, want, 1e-9, 1e-10))
        << kind << " max err " << (got - want).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace attnkit
