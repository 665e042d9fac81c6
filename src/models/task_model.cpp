#include "attnkit/models/task_model.h"

#include "attnkit/error.h"
#include "attnkit/layers/row_linear.h"
#include "attnkit/models/batching.h"
#include "attnkit/models/quantize.h"
#include "attnkit/ops/masks.h"
#include "strict_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace attnkit::models {

Pooling parse_pooling(const std::string& name) {
  if (name == "pooler") return Pooling::Pooler;
  if (name == "first") return Pooling::First;
  if (name == "last") return Pooling::Last;
  if (name == "mean") return Pooling::Mean;
  throw Error(fmt::format("unknown pooling '{}' (known: pooler, first, last, mean)", name));
}

std::string to_string(Pooling pooling) {
  switch (pooling) {
    case Pooling::Pooler: return "pooler";
    case Pooling::First: return "first";
    case Pooling::Last: return "last";
    case Pooling::Mean: return "mean";
  }
  return "?";
}

void to_json(nlohmann::json& j, const HeadsConfig& h) {
  j = nlohmann::json{{"masked_lm", h.masked_lm},
                     {"causal_lm", h.causal_lm},
                     {"tie_lm", h.tie_lm},
                     {"next_sentence", h.next_sentence},
                     {"sequence_labels", h.sequence_labels},
                     {"sequence_pooling", to_string(h.sequence_pooling)},
                     {"sequence_bias", h.sequence_bias},
                     {"token_labels", h.token_labels},
                     {"span", h.span},
                     {"condition_classes", h.condition_classes},
                     {"classifier_dropout", h.classifier_dropout}};
  if (h.pair_labels > 0) j["pair_labels"] = h.pair_labels;  // absent from older checkpoints
  if (h.query_stream) j["query_stream"] = true;              // likewise
}

void from_json(const nlohmann::json& j, HeadsConfig& h) {
  detail::StrictReader r(j, "heads config");
  std::string pooling = to_string(h.sequence_pooling);
  r.read("masked_lm", h.masked_lm);
  r.read("causal_lm", h.causal_lm);
  r.read("tie_lm", h.tie_lm);
  r.read("next_sentence", h.next_sentence);
  r.read("sequence_labels", h.sequence_labels);
  r.read("sequence_pooling", pooling);
  r.read("sequence_bias", h.sequence_bias);
  r.read("token_labels", h.token_labels);
  r.read("span", h.span);
  r.read("condition_classes", h.condition_classes);
  r.read("classifier_dropout", h.classifier_dropout);
  r.read("pair_labels", h.pair_labels);
  r.read("query_stream", h.query_stream);
  r.reject_unknown();
  h.sequence_pooling = parse_pooling(pooling);
}

// ---------------------------------------------------------------------------------------------

MaskedLMHeadImpl::MaskedLMHeadImpl(int64_t hidden, int64_t embedding_size, int64_t vocab_size,
                                   layers::Activation activation, double layer_norm_eps,
                                   bool tied)
    : activation_(activation) {
  dense = register_module("dense", torch::nn::Linear(hidden, embedding_size));
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({embedding_size})
                                                          .eps(layer_norm_eps)));
  if (!tied) decoder = register_parameter("decoder", torch::zeros({vocab_size, embedding_size}));
  bias = register_parameter("bias", torch::zeros({vocab_size}));
}

at::Tensor MaskedLMHeadImpl::forward(const at::Tensor& hidden, const at::Tensor& word_embeddings) {
  auto t = norm->forward(layers::apply_activation(dense->forward(hidden), activation_));
  return layers::dense_linear(t, decoder.defined() ? decoder : word_embeddings, bias);
}

namespace {

void check_positive_or_zero(int64_t value, const char* name) {
  if (value < 0) throw Error(fmt::format("heads config: {} must be >= 0 (got {})", name, value));
}

}  // namespace

TaskModelImpl::TaskModelImpl(const TransformerConfig& config, const HeadsConfig& heads)
    : heads_(heads) {
  check_positive_or_zero(heads.next_sentence, "next_sentence");
  check_positive_or_zero(heads.sequence_labels, "sequence_labels");
  check_positive_or_zero(heads.token_labels, "token_labels");
  check_positive_or_zero(heads.condition_classes, "condition_classes");
  check_positive_or_zero(heads.pair_labels, "pair_labels");
  if ((heads.next_sentence > 0 ||
       ((heads.sequence_labels > 0 || heads.pair_labels > 0) && heads.sequence_pooling == Pooling::Pooler)) &&
      !config.pooler)
    throw Error("heads config: next-sentence and pooler-based classification heads need a "
                "model with a pooler (config.pooler = true)");
  if (heads.query_stream && !heads.causal_lm)
    throw Error("heads config: query_stream needs the causal LM head (causal_lm = true)");
  if (heads.condition_classes > 0 && config.condition_size <= 0)
    throw Error("heads config: condition_classes needs config.condition_size > 0");
  if (heads.classifier_dropout < 0 || heads.classifier_dropout >= 1)
    throw Error(fmt::format("heads config: classifier_dropout must be in [0, 1) (got {})",
                            heads.classifier_dropout));

  transformer = register_module("transformer", TransformerModel(config));
  const auto& c = transformer->config();
  const double std = 0.02;
  torch::NoGradGuard no_grad;
  auto linear = [&](const char* name, int64_t in, int64_t out, bool bias = true) {
    auto layer = register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
    layer->weight.normal_(0.0, std);
    if (bias) layer->bias.zero_();
    return layer;
  };
  if (heads.masked_lm) {
    masked_lm = register_module(
        "masked_lm", MaskedLMHead(c.hidden, c.effective_embedding_size(), c.vocab_size,
                                  c.activation, c.layer_norm_eps,
                                  heads.tie_lm));
    masked_lm->dense->weight.normal_(0.0, std);
    masked_lm->dense->bias.zero_();
    if (masked_lm->decoder.defined()) masked_lm->decoder.normal_(0.0, std);
  }
  if (heads.causal_lm && !heads.tie_lm) {
    if (c.effective_embedding_size() != c.hidden)
      throw Error("heads config: a causal LM head over factorised embeddings is not supported");
    lm_head = register_parameter("lm_head", torch::randn({c.vocab_size, c.hidden}) * std);
  }
  if (heads.causal_lm && heads.tie_lm && c.effective_embedding_size() != c.hidden)
    throw Error("heads config: a tied causal LM head needs embedding_size == hidden");
  if (heads.query_stream)
    query_start = register_parameter("query_start", torch::randn({c.effective_embedding_size()}) * std);
  if (heads.next_sentence > 0) next_sentence = linear("next_sentence", c.hidden, heads.next_sentence);
  if (heads.sequence_labels > 0)
    classifier = linear("classifier", c.hidden, heads.sequence_labels, heads.sequence_bias);
  if (heads.token_labels > 0) tagger = linear("tagger", c.hidden, heads.token_labels);
  if (heads.span) span = linear("span", c.hidden, 2);
  if (heads.pair_labels > 0) {
    pair_hidden = linear("pair_hidden", 4 * c.hidden, c.hidden);
    pair_classifier = linear("pair_classifier", c.hidden, heads.pair_labels);
  }
  if (heads.condition_classes > 0) {
    condition_embedding = register_module(
        "condition_embedding", torch::nn::Embedding(heads.condition_classes, c.condition_size));
    condition_embedding->weight.normal_(0.0, std);
  }
}

at::Tensor TaskModelImpl::pool(const TaskInputs& in, const ModelOutput& out) const {
  const auto& h = out.last_hidden_state;
  switch (heads_.sequence_pooling) {
    case Pooling::Pooler: return out.pooled;
    case Pooling::First: return h.select(1, 0);
    case Pooling::Last: {
      // The last real token of every row (GPT-2's sequence classification).
      auto last = in.attention_mask
                      ? in.attention_mask->to(at::kLong).sum(1).sub(1).clamp_min(0)
                      : at::full({h.size(0)}, h.size(1) - 1, at::kLong);
      return h.index({at::arange(h.size(0), at::kLong), last});
    }
    case Pooling::Mean: {
      if (!in.attention_mask) return h.mean(1);
      auto m = in.attention_mask->to(h.scalar_type()).unsqueeze(-1);
      return (h * m).sum(1) / m.sum(1).clamp_min(1.0);
    }
  }
  return out.pooled;
}

ModelInputs TaskModelImpl::base_inputs(const TaskInputs& in) {
  ModelInputs base = in;
  if (in.condition_ids) {
    if (!condition_embedding)
      throw Error("task model: condition_ids given but the model has no condition embedding "
                  "(heads.condition_classes = 0)");
    if (in.condition)
      throw Error("task model: give either condition_ids or a condition vector, not both");
    base.condition = condition_embedding->forward(*in.condition_ids);
  }
  return base;
}

TwoStreamTaskOutput TaskModelImpl::two_stream_forward(const TaskInputs& in, const at::Tensor& query_mask) {
  if (!query_start.defined())
    throw Error("task model: two-stream attention needs the query stream's start vector (heads.query_stream)");
  auto streams = transformer->two_stream_forward(base_inputs(in), query_start, query_mask);
  TwoStreamTaskOutput out;
  out.content = std::move(streams.content);
  out.query_hidden = streams.query;
  out.query_logits = final_logits(lm_head_product(out.query_hidden, lm_head, *transformer, false),
                                  transformer->config());
  return out;
}

TaskOutput TaskModelImpl::forward(const TaskInputs& in) {
  TaskOutput out;
  out.base = transformer->forward(base_inputs(in));
  const auto& h = out.base.last_hidden_state;
  auto dropout = [&](const at::Tensor& x) {
    return at::dropout(x, heads_.classifier_dropout, is_training());
  };
  if (masked_lm) out.masked_lm_logits = masked_lm->forward(h, transformer->word_embeddings());
  if (heads_.causal_lm)
    out.causal_lm_logits =
        final_logits(lm_head_product(h, lm_head, *transformer, false), transformer->config());
  if (next_sentence) out.next_sentence_logits = next_sentence->forward(out.base.pooled);
  if (classifier) out.sequence_logits = classifier->forward(dropout(pool(in, out.base)));
  if (tagger) out.token_logits = tagger->forward(dropout(h));
  if (span) {
    auto logits = span->forward(h);
    out.start_logits = logits.select(-1, 0);
    out.end_logits = logits.select(-1, 1);
  }
  return out;
}

at::Tensor TaskModelImpl::encode(const TaskInputs& in) {
  if (in.condition_ids) throw Error("task model: encode takes no condition_ids");
  return pool(in, transformer->forward(in));
}

at::Tensor TaskModelImpl::pair_logits(const TaskInputs& left, const TaskInputs& right) {
  if (!pair_classifier) throw Error("task model: pair_logits needs heads.pair_labels > 0");
  const auto u = encode(left), v = encode(right);
  if (u.size(0) != v.size(0))
    throw Error(fmt::format("task model: pair_logits got {} left and {} right rows", u.size(0), v.size(0)));
  auto features = at::cat({u, v, u * v, u - v}, -1);
  features = at::dropout(features, heads_.classifier_dropout, is_training());
  auto h = layers::apply_activation(pair_hidden->forward(features), transformer->config().activation);
  return pair_classifier->forward(at::dropout(h, heads_.classifier_dropout, is_training()));
}

// ---------------------------------------------------------------------------------------------

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& labels) {
  if (logits.dim() != labels.dim() + 1 ||
      logits.sizes().slice(0, labels.dim()) != labels.sizes())
    throw Error(fmt::format("cross_entropy: logits [{}] do not fit labels [{}] (logits must be "
                            "labels' shape + [classes])",
                            fmt::join(logits.sizes(), ", "), fmt::join(labels.sizes(), ", ")));
  const int64_t classes = logits.size(-1);
  auto flat_labels = labels.reshape({-1}).to(at::kLong);
  auto counted = flat_labels.ne(kIgnoreLabel);
  if (counted.any().item<bool>()) {
    auto valid = flat_labels.masked_select(counted);
    if (valid.lt(0).any().item<bool>() || valid.ge(classes).any().item<bool>())
      throw Error(fmt::format("cross_entropy: labels must lie in [0, {}) or be {} (got min {}, "
                              "max {})",
                              classes, kIgnoreLabel, valid.min().item<int64_t>(),
                              valid.max().item<int64_t>()));
  } else {
    return logits.sum() * 0.0;  // nothing to predict: zero loss that still has a graph
  }
  return at::cross_entropy_loss(logits.reshape({-1, classes}), flat_labels, {},
                                at::Reduction::Mean, kIgnoreLabel);
}

at::Tensor next_token_targets(const at::Tensor& input_ids,
                              const c10::optional<at::Tensor>& attention_mask) {
  if (input_ids.dim() != 2) throw Error("next_token_targets: input_ids must be [batch, n]");
  auto targets = at::full_like(input_ids, kIgnoreLabel, input_ids.options().dtype(at::kLong));
  const int64_t n = input_ids.size(1);
  if (n < 2) return targets;
  auto next = input_ids.slice(1, 1).to(at::kLong);
  if (attention_mask)
    next = next.masked_fill(attention_mask->slice(1, 1).logical_not(), kIgnoreLabel);
  targets.slice(1, 0, n - 1).copy_(next);
  return targets;
}

at::Tensor span_loss(const at::Tensor& start_logits, const at::Tensor& end_logits,
                     const at::Tensor& start_positions, const at::Tensor& end_positions) {
  return (cross_entropy(start_logits, start_positions) + cross_entropy(end_logits, end_positions)) /
         2.0;
}

UnilmBatch unilm_batch(const std::vector<std::vector<int64_t>>& sources,
                       const std::vector<std::vector<int64_t>>& targets, int64_t cls_id,
                       int64_t sep_id, int64_t pad_id) {
  if (sources.size() != targets.size() || sources.empty())
    throw Error(fmt::format("unilm_batch: need as many targets as sources, at least one (got {} "
                            "and {})",
                            sources.size(), targets.size()));
  const int64_t batch = static_cast<int64_t>(sources.size());
  // [CLS] source [SEP] target [SEP] per row; where the target starts.
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(batch));
  std::vector<int64_t> target_starts;
  for (int64_t b = 0; b < batch; ++b) {
    auto& row = rows[static_cast<size_t>(b)];
    row.push_back(cls_id);
    row.insert(row.end(), sources[b].begin(), sources[b].end());
    row.push_back(sep_id);
    target_starts.push_back(static_cast<int64_t>(row.size()));
    row.insert(row.end(), targets[b].begin(), targets[b].end());
    row.push_back(sep_id);
  }
  UnilmBatch out;
  PaddedIds padded = right_padded_ids(rows, pad_id);
  out.input_ids = std::move(padded.ids);
  out.attention_mask = std::move(padded.attention_mask);
  const int64_t n = out.input_ids.size(1);
  out.token_type_ids = at::ones({batch, n}, at::kLong);
  out.targets = at::full({batch, n}, kIgnoreLabel, at::kLong);
  auto types = out.token_type_ids.accessor<int64_t, 2>();
  auto next = out.targets.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    const auto& row = rows[static_cast<size_t>(b)];
    const int64_t target_start = target_starts[static_cast<size_t>(b)];
    for (int64_t t = 0; t < static_cast<int64_t>(row.size()); ++t) {
      types[b][t] = t < target_start ? 0 : 1;
      // The [SEP] closing the source predicts the first target token, the last target token
      // predicts the closing [SEP].
      if (t >= target_start - 1 && t + 1 < static_cast<int64_t>(row.size())) next[b][t] = row[t + 1];
    }
  }
  out.mask = ops::unilm_mask(out.token_type_ids);
  out.prefix_lengths = ops::unilm_prefix_lengths(out.token_type_ids);
  return out;
}

TaskInputs UnilmBatch::inputs() const {
  TaskInputs in;
  in.input_ids = input_ids;
  in.token_type_ids = token_type_ids;
  in.attention_mask = attention_mask;
  in.mask = mask;
  in.prefix_lengths = prefix_lengths;
  return in;
}

}  // namespace attnkit::models
