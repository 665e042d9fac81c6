#include "attnkit/decode/language_models.h"

#include "attnkit/decode/incremental.h"
#include "attnkit/error.h"

#include <fmt/format.h>
#include <torch/torch.h>

namespace attnkit::decode {

models::Decoding start_decoding(models::Model& model, const models::DecodingRequest& request) {
  return model.decoding(request, caches());
}

std::vector<std::vector<int64_t>> unilm_greedy(models::TaskModel model,
                                               const std::vector<std::vector<int64_t>>& sources,
                                               int64_t cls_id, int64_t sep_id, int64_t pad_id,
                                               int64_t max_new_tokens, int64_t max_length) {
  if (!model->masked_lm) throw Error("unilm_greedy: the model has no masked-LM head");
  if (model->heads().causal_lm)
    throw Error("unilm_greedy: the model has a causal-LM head, so it decodes as a causal LM");
  if (max_new_tokens < 0)
    throw Error(fmt::format("unilm_greedy: max_new_tokens {} < 0", max_new_tokens));
  std::vector<std::vector<int64_t>> out(sources.size());
  // Row r may produce `limit[r]` tokens: the prefix's last position stays inside max_length
  // (the input [CLS] src [SEP] prefix [SEP] of the uncached formulation) and max_positions.
  std::vector<int64_t> limit;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<size_t> rows;
  int64_t longest = 0;
  const int64_t positions = model->config().max_positions;
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto src = static_cast<int64_t>(sources[i].size());
    int64_t n = std::min(max_new_tokens, positions - (src + 2));
    if (max_length > 0) n = std::min(n, max_length - 2 - src);
    limit.push_back(n);
    if (n <= 0) continue;
    std::vector<int64_t> p{cls_id};
    p.insert(p.end(), sources[i].begin(), sources[i].end());
    p.push_back(sep_id);
    prompts.push_back(std::move(p));
    rows.push_back(i);
    longest = std::max(longest, n);
  }
  if (prompts.empty()) return out;
  GenerationConfig config;
  config.strategy = Strategy::Greedy;
  config.max_new_tokens = longest;
  config.eos_token_ids = {sep_id};
  config.pad_token_id = pad_id;
  torch::NoGradGuard no_grad;
  models::DecodingRequest request;
  request.prompts = prompts;
  request.name = "unilm_greedy";
  models::Decoding decoding = start_decoding(*model, request);
  auto results = generate(*decoding.session, decoding.prompts, config);
  for (size_t k = 0; k < rows.size(); ++k) {
    auto tokens = results[k][0].tokens;
    if (!tokens.empty() && tokens.back() == sep_id) tokens.pop_back();
    // A row decodes independently of its batchmates, so its first limit tokens are what a
    // decode stopped at its own limit gives.
    if (static_cast<int64_t>(tokens.size()) > limit[rows[k]]) tokens.resize(limit[rows[k]]);
    out[rows[k]] = std::move(tokens);
  }
  return out;
}

}  // namespace attnkit::decode
