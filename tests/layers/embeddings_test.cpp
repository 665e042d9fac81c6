// Embeddings against a hand-built float64 sum of table rows (word + position + token type, then
// LayerNorm and ALBERT's projection), learned and sinusoidal positions (the latter against
// Vaswani et al.'s formula), position_offset; finite-difference gradients; one-line errors.
#include "attnkit/layers/embeddings.h"
#include "layers/layer_checks.h"
#include "layers/textbook.h"
#include "support/gradcheck.h"
#include "support/test_files.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace attnkit {
namespace {

using layers::Embeddings;
using layers::EmbeddingsOptions;
using layers::PositionEncoding;

// Row `id` of a [rows, E] table, picked by loops rather than by an embedding op.
at::Tensor rows(const at::Tensor& table, const at::Tensor& ids) {
  std::vector<at::Tensor> out;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    std::vector<at::Tensor> seq;
    for (int64_t i = 0; i < ids.size(1); ++i) seq.push_back(table[ids[b][i].item<int64_t>()]);
    out.push_back(torch::stack(seq));
  }
  return torch::stack(out);
}

// PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).
at::Tensor vaswani_positions(int64_t from, int64_t n, int64_t d) {
  at::Tensor table = torch::empty({n, d}, torch::kDouble);
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < d; i += 2) {
      const double angle = double(from + p) / std::pow(10000.0, double(i) / double(d));
      table[p][i] = std::sin(angle);
      if (i + 1 < d) table[p][i + 1] = std::cos(angle);
    }
  return table;
}

at::Tensor ids(std::vector<int64_t> values, int64_t batch) {
  return torch::tensor(values, torch::kLong).view({batch, -1});
}

TEST(Embeddings, LearnedPositionsTokenTypesNormAndProjection) {
  torch::manual_seed(31);
  Embeddings emb(EmbeddingsOptions(11, 6).hidden(4).max_positions(9).type_vocab_size(3)
                     .layer_norm_eps(1e-5));
  testing::randomize(*emb);
  const at::Tensor input = ids({3, 0, 10, 7, 7, 1, 2, 5}, 2);
  const at::Tensor types = ids({0, 1, 2, 1, 2, 2, 0, 0}, 2);
  for (int64_t offset : {0, 3, 5}) {
    SCOPED_TRACE(offset);
    at::Tensor sum = rows(emb->token->weight, input) +
                     emb->position->weight.slice(0, offset, offset + 4).unsqueeze(0) +
                     rows(emb->token_type->weight, types);
    at::Tensor want = textbook::linear(textbook::layer_norm(sum, emb->norm), emb->projection);
    EXPECT_TRUE(testing::close(emb->forward(input, types, offset), want));
    // Without token type ids every token is type 0.
    at::Tensor type0 = rows(emb->token->weight, input) +
                       emb->position->weight.slice(0, offset, offset + 4).unsqueeze(0) +
                       emb->token_type->weight[0];
    EXPECT_TRUE(testing::close(emb->forward(input, c10::nullopt, offset),
                               textbook::linear(textbook::layer_norm(type0, emb->norm), emb->projection)));
  }
  // The last position that fits.
  EXPECT_EQ(emb->forward(input, types, 5).sizes(), (std::vector<int64_t>{2, 4, 4}));
}

TEST(Embeddings, PlainSumWithoutNormOrTypes) {
  torch::manual_seed(32);
  Embeddings emb(EmbeddingsOptions(7, 5).layer_norm(false).max_positions(6));
  testing::randomize(*emb);
  EXPECT_FALSE(emb->token_type);
  EXPECT_FALSE(emb->norm);
  EXPECT_FALSE(emb->projection);
  const at::Tensor input = ids({6, 0, 2, 2, 4, 1}, 3);
  EXPECT_TRUE(testing::close(emb->forward(input, c10::nullopt, 4),
                             rows(emb->token->weight, input) +
                                 emb->position->weight.slice(0, 4, 6).unsqueeze(0)));
  // No positions: the word embedding alone, at any length.
  Embeddings bare(EmbeddingsOptions(7, 5).layer_norm(false).positions(PositionEncoding::None).max_positions(2));
  testing::randomize(*bare);
  const at::Tensor longer = ids({1, 2, 3, 4, 5, 6}, 1);
  EXPECT_TRUE(testing::close(bare->forward(longer, c10::nullopt, 100), rows(bare->token->weight, longer)));
}

TEST(Embeddings, SinusoidalPositionsFollowVaswani) {
  torch::manual_seed(33);
  // Odd size too: the last column is a sine.
  for (int64_t d : {6, 7}) {
    SCOPED_TRACE(d);
    Embeddings emb(EmbeddingsOptions(9, d).positions(PositionEncoding::Sinusoidal)
                       .max_positions(40).layer_norm(false));
    testing::randomize(*emb);
    const at::Tensor input = ids({1, 8, 0, 4, 4, 2, 3, 7}, 2);
    for (int64_t offset : {0, 17, 36}) {
      SCOPED_TRACE(offset);
      at::Tensor got = emb->forward(input, c10::nullopt, offset) - rows(emb->token->weight, input);
      // The table is stored in float32 (sinusoidal_positions), so it is exact to float32 rounding.
      EXPECT_TRUE(testing::close(got, vaswani_positions(offset, 4, d).unsqueeze(0).expand({2, 4, d}), 1e-7));
    }
    EXPECT_TRUE(testing::close(layers::sinusoidal_positions(40, d), vaswani_positions(0, 40, d), 1e-7));
  }
}

// Marian's layout (transformers' MarianSinusoidalPositionalEmbedding): the same frequencies,
// sin(p / 10000^(2i/d)) in column i for i < ceil(d/2), cos(p / 10000^(2i/d)) in column
// ceil(d/2) + i; Marian's scale_embedding multiplies the token rows only; BART's learned table
// is read 2 rows on (position p = row p + 2).
TEST(Embeddings, MarianSinusoidHalvesTokenScaleAndBartOffset) {
  torch::manual_seed(34);
  for (int64_t d : {6, 7}) {
    SCOPED_TRACE(d);
    const int64_t sines = (d + 1) / 2;
    at::Tensor want = torch::empty({30, d}, torch::kDouble);
    for (int64_t p = 0; p < 30; ++p)
      for (int64_t i = 0; i < sines; ++i) {
        const double angle = double(p) / std::pow(10000.0, double(2 * i) / double(d));
        want[p][i] = std::sin(angle);
        if (sines + i < d) want[p][sines + i] = std::cos(angle);
      }
    EXPECT_TRUE(testing::close(layers::sinusoidal_positions(30, d, /*halves=*/true), want, 1e-7));
    Embeddings emb(EmbeddingsOptions(9, d).positions(PositionEncoding::SinusoidalHalves)
                       .max_positions(30).layer_norm(false).token_scale(2.5));
    testing::randomize(*emb);
    const at::Tensor input = ids({1, 8, 0, 4, 4, 2}, 2);
    at::Tensor got = emb->forward(input, c10::nullopt, 11);
    at::Tensor expected = rows(emb->token->weight, input).to(torch::kDouble) * 2.5 +
                          want.slice(0, 11, 14).unsqueeze(0);
    EXPECT_TRUE(testing::close(got, expected, 1e-6));
  }
  Embeddings bart(EmbeddingsOptions(9, 4).max_positions(6).position_id_offset(2).layer_norm(false));
  testing::randomize(*bart);
  EXPECT_EQ(bart->position->weight.size(0), 8);
  const at::Tensor input = ids({3, 5, 7}, 1);
  EXPECT_TRUE(testing::close(bart->forward(input, c10::nullopt, 3),
                             rows(bart->token->weight, input) +
                                 bart->position->weight.slice(0, 5, 8).unsqueeze(0)));
  // Per-token positions (incremental decoding) are offset alike.
  EXPECT_TRUE(testing::close(bart->forward(input, c10::nullopt, 0, c10::nullopt, ids({5, 0, 2}, 1)),
                             rows(bart->token->weight, input) +
                                 torch::stack({bart->position->weight[7], bart->position->weight[2],
                                               bart->position->weight[4]}).unsqueeze(0)));
  // The last position fits; one more does not.
  EXPECT_EQ(bart->forward(input, c10::nullopt, 3).size(1), 3);
  EXPECT_NE(testing::error_of([&] { bart->forward(input, c10::nullopt, 4); }), "");
}

TEST(Embeddings, ConditionalLayerNorm) {
  torch::manual_seed(34);
  Embeddings emb(EmbeddingsOptions(5, 4).condition_size(2).max_positions(4));
  testing::randomize(*emb);  // the condition maps too (they start at zero)
  const at::Tensor input = ids({4, 3, 0, 1, 2, 2}, 2);
  const at::Tensor condition = torch::randn({2, 2}, torch::kDouble);
  at::Tensor sum = rows(emb->token->weight, input) + emb->position->weight.slice(0, 1, 4).unsqueeze(0);
  EXPECT_TRUE(testing::close(emb->forward(input, c10::nullopt, 1, condition),
                             textbook::layer_norm(sum, emb->norm, condition)));
}

TEST(Embeddings, GradientsByFiniteDifferences) {
  torch::manual_seed(35);
  Embeddings emb(EmbeddingsOptions(6, 4).hidden(3).max_positions(5).type_vocab_size(2)
                     .condition_size(2).layer_norm_eps(1e-5));
  testing::randomize(*emb);
  const at::Tensor input = ids({5, 1, 1, 0, 2, 3}, 2);
  const at::Tensor types = ids({0, 1, 1, 0, 0, 1}, 2);
  at::Tensor condition = torch::randn({2, 2}, torch::kDouble).requires_grad_();
  std::vector<at::Tensor> inputs{condition};
  for (auto& p : emb->parameters()) inputs.push_back(p);
  auto result = testing::gradcheck(
      [&](const std::vector<at::Tensor>& t) { return emb->forward(input, types, 1, t[0]); }, inputs);
  EXPECT_TRUE(result.ok) << result.message;
}

TEST(Embeddings, BadIdsAndLengthsAreOneLineErrors) {
  Embeddings emb(EmbeddingsOptions(10, 4).max_positions(6).type_vocab_size(2));
  auto expect_error = [](auto action, const std::string& fragment) {
    const std::string message = testing::error_of(action);
    EXPECT_NE(message.find(fragment), std::string::npos) << "message: '" << message << "'";
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  expect_error([&] { emb->forward(ids({1, 10, 2}, 1)); },
               "embeddings: token id 10 is outside the vocabulary [0, 10)");
  expect_error([&] { emb->forward(ids({1, -1, 2}, 1)); },
               "embeddings: token id -1 is outside the vocabulary [0, 10)");
  expect_error([&] { emb->forward(ids({1, 2, 3, 4, 5, 6, 7}, 1)); },
               "embeddings: sequence of 7 tokens (from position 0) exceeds max_positions 6");
  expect_error([&] { emb->forward(ids({1, 2, 3}, 1), c10::nullopt, 4); },
               "embeddings: sequence of 3 tokens (from position 4) exceeds max_positions 6");
  expect_error([&] { emb->forward(ids({1, 2, 3}, 1), c10::nullopt, -1); },
               "embeddings: position_offset must be >= 0, got -1");
  expect_error([&] { emb->forward(ids({1, 2, 3}, 1), ids({0, 2, 1}, 1)); },
               "embeddings: token type ids must lie in [0, 2)");
  expect_error([&] { emb->forward(ids({1, 2, 3}, 1), ids({0, 1}, 1)); },
               "embeddings: token_type_ids must be [1, 3], got [1, 2]");
  expect_error([&] { emb->forward(torch::tensor({1, 2}, torch::kLong)); },
               "embeddings: input_ids must be [batch, n], got [2]");
  // Exactly max_positions tokens still fit.
  EXPECT_EQ(emb->forward(ids({1, 2, 3, 4, 5, 6}, 1)).sizes(), (std::vector<int64_t>{1, 6, 4}));
}

}  // namespace
}  // namespace attnkit
