// Cached encoder-decoder decoding under head gates (analysis/heads.h's ablations decode with
// them): at every site (encoder self, decoder self, decoder cross), the cached decoder's logits
// equal the uncached decode's under the same gates, and the gates change them.
#include "attnkit/decode/language_models.h"
#include "attnkit/models/encoder_decoder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using namespace attnkit;

TEST(Seq2SeqGates, CachedDecoderFollowsHeadGatesAtEverySite) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto config = models::EncoderDecoderConfig::transformer(20, 20, 16, 2, 4, 32);
  config.encoder.dropout = config.decoder.dropout = 0;
  models::EncoderDecoderModel model(config);
  model->to(torch::kDouble);
  for (auto& p : model->parameters()) p.normal_(0.0, 0.5);  // heads that matter
  model->eval();
  const std::vector<std::vector<int64_t>> sources{{3, 4, 5, 6}, {7, 8}};
  at::Tensor src = at::tensor({3, 4, 5, 6, 7, 8, 0, 0}, at::kLong).view({2, 4});
  at::Tensor src_mask = src.ne(0).to(at::kLong);
  auto gate = [](std::vector<double> g) { return torch::tensor(g, torch::kDouble); };
  // Cached logits of 5 steps of a fixed target, and the uncached decode's.
  auto run = [&] {
    models::DecodingRequest request;
    request.prompts = sources;
    const auto session = decode::start_decoding(*model, request).session;
    models::DecodingSession& lm = *session;
    const int64_t B = 2, steps = 5;
    lm.start(B, steps);
    at::Tensor target = at::tensor({1, 9, 4, 12, 5, 1, 3, 3, 17, 6}, at::kLong).view({2, 5});
    // Cached first: the uncached forward leaves each depth's gates on its block, which must not
    // be what the cached decoder relies on (right after set_head_gates, as the ablations decode).
    std::vector<at::Tensor> cached;
    for (int64_t t = 0; t < steps; ++t)
      cached.push_back(lm.forward(target.narrow(1, t, 1), at::ones({B, 1}, at::kBool),
                                  at::full({B, 1}, t, at::kLong)));
    at::Tensor memory = model->encode(src, src_mask);
    at::Tensor full = model->decode(target, memory, src_mask);
    return std::make_pair(at::stack(cached, 1), full);
  };
  const auto [plain, plain_full] = run();
  EXPECT_LT((plain - plain_full).abs().max().item<double>(), 1e-9);
  for (int site = 0; site < 3; ++site) {
    SCOPED_TRACE("site " + std::to_string(site));
    const std::vector<at::Tensor> gates{gate({1, 0, 1, 0.5}), gate({0, 1, 1, 1})};
    if (site == 0) model->encoder->set_head_gates(gates);
    if (site == 1) model->decoder->set_head_gates(gates);
    if (site == 2) model->decoder->set_head_gates(gates, models::AttentionSite::Cross);
    const auto [cached, full] = run();
    EXPECT_LT((cached - full).abs().max().item<double>(), 1e-9);
    EXPECT_GT((cached - plain).abs().max().item<double>(), 1e-3) << "the gates changed nothing";
    model->encoder->set_head_gates({});
    model->decoder->set_head_gates({});
    model->decoder->set_head_gates({}, models::AttentionSite::Cross);
  }
  const auto [again, again_full] = run();
  EXPECT_LT((again - plain).abs().max().item<double>(), 1e-12) << "removed gates still act";
}

}  // namespace
