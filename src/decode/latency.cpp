// Per-token decoding latency (decode/latency.h).
#include "attnkit/decode/latency.h"

#include "attnkit/decode/language_models.h"
#include "attnkit/error.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace attnkit::decode {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

models::TaskModel random_causal_lm(const std::string& kind, int64_t layers, int64_t hidden,
                                   int64_t heads, int64_t vocab, int64_t max_positions) {
  auto config = models::TransformerConfig::gpt2(vocab, hidden, layers, heads);
  config.attention = layers::AttentionSpec::parse(kind);
  config.attention.causal = true;
  config.max_positions = max_positions;
  config.dropout = 0;
  models::HeadsConfig heads_config;
  heads_config.causal_lm = true;
  torch::manual_seed(0);
  models::TaskModel model(config, heads_config);
  model->eval();
  return model;
}

TokenLatency token_latency(const models::TaskModel& model, int64_t position, int64_t steps) {
  if (position < 1 || steps < 1)
    throw Error(fmt::format("token_latency: position {} and steps {} must be >= 1", position, steps));
  if (position + steps > model->config().max_positions)
    throw Error(fmt::format("token_latency: position {} + steps {} exceed the model's {} positions", position,
                            steps, model->config().max_positions));
  torch::NoGradGuard no_grad;
  const int64_t vocab = model->config().vocab_size;
  const auto session = start_decoding(*model.ptr(), {}).session;
  models::DecodingSession& lm = *session;
  lm.start(1, position + steps);
  TokenLatency out;
  const double t0 = now();
  lm.forward(torch::randint(vocab, {1, position}, at::kLong), at::ones({1, position}, at::kBool),
             at::arange(position, at::kLong).view({1, position}));
  out.prefill_s = now() - t0;
  std::vector<double> times;
  for (int64_t s = 0; s < steps; ++s) {
    const at::Tensor next = torch::randint(vocab, {1, 1}, at::kLong);
    const double t = now();
    lm.forward(next, at::ones({1, 1}, at::kBool), at::full({1, 1}, position + s, at::kLong)).argmax(-1).item<int64_t>();
    times.push_back(now() - t);
  }
  std::sort(times.begin(), times.end());
  out.ms_per_token = 1e3 * times[times.size() / 2];
  out.state_bytes = lm.state_bytes();
  return out;
}

}  // namespace attnkit::decode
