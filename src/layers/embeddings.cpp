#include "attnkit/layers/embeddings.h"

#include "attnkit/error.h"

#include <fmt/format.h>

#include <cmath>

namespace attnkit::layers {

PositionEncoding parse_position_encoding(const std::string& name) {
  if (name == "learned" || name == "absolute") return PositionEncoding::Learned;
  if (name == "sinusoidal") return PositionEncoding::Sinusoidal;
  if (name == "none") return PositionEncoding::None;
  if (name == "sinusoidal-halves") return PositionEncoding::SinusoidalHalves;
  throw Error(fmt::format("unknown position encoding '{}' (known: learned, sinusoidal, none, "
                          "sinusoidal-halves)",
                          one_line(name)));
}

const char* position_encoding_name(PositionEncoding encoding) {
  switch (encoding) {
    case PositionEncoding::Learned: return "learned";
    case PositionEncoding::Sinusoidal: return "sinusoidal";
    case PositionEncoding::None: return "none";
    case PositionEncoding::SinusoidalHalves: return "sinusoidal-halves";
  }
  return "?";
}

at::Tensor sinusoidal_positions(int64_t positions, int64_t size, bool halves) {
  at::Tensor table = torch::zeros({positions, size}, torch::kFloat64);
  auto t = table.accessor<double, 2>();
  const int64_t sines = (size + 1) / 2;  // halves: the columns holding sines
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < size; ++i) {
      const double angle = double(p) / std::pow(10000.0, double(2 * (i / 2)) / double(size));
      const double value = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
      t[p][halves ? (i % 2 == 0 ? i / 2 : sines + i / 2) : i] = value;
    }
  return table.to(torch::kFloat32);
}

EmbeddingsImpl::EmbeddingsImpl(const EmbeddingsOptions& options) : options_(options) {
  const int64_t E = options.embedding_size();
  if (options.vocab_size() <= 0 || E <= 0)
    throw Error(fmt::format("embeddings: vocab_size ({}) and embedding_size ({}) must be positive",
                            options.vocab_size(), E));
  token = register_module("token", torch::nn::Embedding(options.vocab_size(), E));
  if (options.position_id_offset() < 0)
    throw Error(fmt::format("embeddings: position_id_offset must be >= 0, got {}",
                            options.position_id_offset()));
  if (options.padding_positions() >= 0 &&
      (options.positions() != PositionEncoding::Learned ||
       options.position_id_offset() != options.padding_positions() + 1))
    throw Error(fmt::format("embeddings: padding_positions {} needs learned positions and "
                            "position_id_offset {} (got {})",
                            options.padding_positions(), options.padding_positions() + 1,
                            options.position_id_offset()));
  if (options.positions() == PositionEncoding::Learned)
    position = register_module(
        "position",
        torch::nn::Embedding(options.max_positions() + options.position_id_offset(), E));
  else if (options.positions() == PositionEncoding::Sinusoidal ||
           options.positions() == PositionEncoding::SinusoidalHalves)
    sinusoid_ = register_buffer(
        "sinusoid",
        sinusoidal_positions(options.max_positions(), E,
                             options.positions() == PositionEncoding::SinusoidalHalves));
  if (options.type_vocab_size() > 0)
    token_type = register_module("token_type", torch::nn::Embedding(options.type_vocab_size(), E));
  if (options.layer_norm())
    norm = register_module("norm", ConditionalLayerNorm(ConditionalLayerNormOptions(E)
                                                            .eps(options.layer_norm_eps())
                                                            .condition_size(options.condition_size())));
  if (options.hidden() > 0 && options.hidden() != E)
    projection = register_module("projection", torch::nn::Linear(E, options.hidden()));
}

at::Tensor EmbeddingsImpl::forward(const at::Tensor& input_ids,
                                   const c10::optional<at::Tensor>& token_type_ids,
                                   int64_t position_offset,
                                   const c10::optional<at::Tensor>& condition,
                                   const c10::optional<at::Tensor>& position_ids) {
  if (input_ids.dim() != 2)
    throw Error(fmt::format("embeddings: input_ids must be [batch, n], got [{}]",
                            fmt::join(input_ids.sizes(), ", ")));
  const int64_t n = input_ids.size(1);
  if (n > 0) {
    const int64_t lo = input_ids.min().item<int64_t>(), hi = input_ids.max().item<int64_t>();
    if (lo < 0 || hi >= options_.vocab_size())
      throw Error(fmt::format("embeddings: token id {} is outside the vocabulary [0, {})",
                              lo < 0 ? lo : hi, options_.vocab_size()));
  }
  at::Tensor x = token->forward(input_ids);
  if (options_.token_scale() != 1.0) x = x * options_.token_scale();
  if (options_.padding_positions() >= 0 && !position_ids) {
    // RoBERTa: a real token's position counts the real tokens before it; padding gets -1 (row
    // padding_positions of the table).
    const at::Tensor real = input_ids.ne(options_.padding_positions()).to(at::kLong);
    const at::Tensor ids = (real.cumsum(1) + position_offset) * real - 1;
    return forward_vectors(x, token_type_ids, position_offset, condition, ids);
  }
  return forward_vectors(x, token_type_ids, position_offset, condition, position_ids);
}

at::Tensor EmbeddingsImpl::forward_vectors(const at::Tensor& vectors,
                                           const c10::optional<at::Tensor>& token_type_ids,
                                           int64_t position_offset,
                                           const c10::optional<at::Tensor>& condition,
                                           const c10::optional<at::Tensor>& position_ids) {
  if (vectors.dim() != 3 || vectors.size(2) != options_.embedding_size())
    throw Error(fmt::format("embeddings: token vectors must be [batch, n, {}], got [{}]",
                            options_.embedding_size(), fmt::join(vectors.sizes(), ", ")));
  const std::vector<int64_t> rows{vectors.size(0), vectors.size(1)};
  const int64_t n = vectors.size(1);
  if (position_offset < 0)
    throw Error(fmt::format("embeddings: position_offset must be >= 0, got {}", position_offset));
  if (position_ids) {
    if (position_ids->sizes() != at::IntArrayRef(rows))
      throw Error(fmt::format("embeddings: position_ids must be [{}], got [{}]",
                              fmt::join(rows, ", "),
                              fmt::join(position_ids->sizes(), ", ")));
    // -1: a padding token of RoBERTa's positions (row padding_positions).
    const int64_t lowest = options_.padding_positions() >= 0 ? -1 : 0;
    if (n > 0 && options_.positions() != PositionEncoding::None &&
        (position_ids->min().item<int64_t>() < lowest ||
         position_ids->max().item<int64_t>() >= options_.max_positions()))
      throw Error(fmt::format("embeddings: position ids must lie in [{}, {}) (max_positions)", lowest,
                              options_.max_positions()));
  } else if (options_.positions() != PositionEncoding::None &&
             position_offset + n > options_.max_positions())
    throw Error(fmt::format("embeddings: sequence of {} tokens (from position {}) exceeds "
                            "max_positions {}",
                            n, position_offset, options_.max_positions()));
  at::Tensor x = vectors;
  const bool sinusoidal = options_.positions() == PositionEncoding::Sinusoidal ||
                          options_.positions() == PositionEncoding::SinusoidalHalves;
  const int64_t row_offset = options_.position_id_offset();
  if (position_ids && options_.positions() == PositionEncoding::Learned) {
    x = x + position->forward(position_ids->to(at::kLong) + row_offset);
  } else if (position_ids && sinusoidal) {
    x = x + sinusoid_.index({position_ids->to(at::kLong)}).to(x.dtype());
  } else if (options_.positions() == PositionEncoding::Learned) {
    at::Tensor ids = torch::arange(position_offset + row_offset, position_offset + row_offset + n,
                                   at::TensorOptions(at::kLong).device(x.device()));
    x = x + position->forward(ids).unsqueeze(0);
  } else if (sinusoidal) {
    x = x + sinusoid_.slice(0, position_offset, position_offset + n).to(x.dtype()).unsqueeze(0);
  }
  if (token_type) {
    if (token_type_ids) {
      if (token_type_ids->sizes() != at::IntArrayRef(rows))
        throw Error(fmt::format("embeddings: token_type_ids must be [{}], got [{}]",
                                fmt::join(rows, ", "),
                                fmt::join(token_type_ids->sizes(), ", ")));
      if (n > 0 && (token_type_ids->min().item<int64_t>() < 0 ||
                    token_type_ids->max().item<int64_t>() >= options_.type_vocab_size()))
        throw Error(fmt::format("embeddings: token type ids must lie in [0, {})",
                                options_.type_vocab_size()));
      x = x + token_type->forward(*token_type_ids);
    } else {
      x = x + token_type->weight[0];
    }
  }
  if (norm) x = norm->forward(x, condition);
  if (options_.dropout() > 0) x = torch::dropout(x, options_.dropout(), is_training());
  if (projection) x = projection->forward(x);
  return x;
}

}  // namespace attnkit::layers
