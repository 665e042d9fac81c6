#include "attnkit/models/transformer_model.h"

#include "attnkit/error.h"

#include "../layers/fused_step.h"
#include "../ops/cpu/blas.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_set>
#include <vector>

namespace attnkit::models {

using layers::TransformerBlock;

layers::TransformerBlockOptions TransformerModelImpl::block_options(int64_t layer) const {
  const auto& c = config_;
  return layers::TransformerBlockOptions(c.hidden, c.heads, c.intermediate)
      .activation(c.activation)
      .norm_first(c.norm_first)
      .layer_norm_eps(c.layer_norm_eps)
      .attention(c.layer_attention(layer))
      .norm(c.norm)
      .gated_mlp(c.gated_mlp)
      .mlp_bias(c.mlp_bias)
      .sublayer_output_norm(c.sublayer_output_norm)
      .cross_attention(c.cross_attention)
      .cross_spec(c.layer_cross_attention(layer))
      .memory_hidden(c.memory_hidden)
      .dropout(c.dropout)
      .attention_dropout(c.attention_dropout)
      .condition_size(c.condition_size);
}

TransformerModelImpl::TransformerModelImpl(const TransformerConfig& config) : config_(config) {
  config_.validate();
  const auto& c = config_;
  embeddings = register_module(
      "embeddings",
      layers::Embeddings(layers::EmbeddingsOptions(c.vocab_size, c.effective_embedding_size())
                             .hidden(c.hidden)
                             .max_positions(c.max_positions)
                             .positions(c.positions)
                             .type_vocab_size(c.type_vocab_size)
                             .layer_norm(c.embedding_layer_norm)
                             .layer_norm_eps(c.layer_norm_eps)
                             .condition_size(c.condition_size)
                             .dropout(c.dropout)
                             .token_scale(c.embedding_scale)
                             .position_id_offset(c.position_id_offset)
                             .padding_positions(c.padding_positions ? c.pad_token_id : -1)));
  blocks = register_module("blocks", torch::nn::ModuleList());
  const int64_t count = c.share_layers ? c.layer_groups : c.layers;
  for (int64_t i = 0; i < count; ++i) blocks->push_back(TransformerBlock(block_options(i)));
  if (c.final_layer_norm)
    final_norm = register_module(
        "final_norm", layers::ConditionalLayerNorm(layers::ConditionalLayerNormOptions(c.hidden)
                                                       .eps(c.layer_norm_eps)
                                                       .condition_size(c.condition_size)
                                                       .kind(c.norm)));
  if (c.rotary) rotary_ = std::make_shared<ops::RotaryEmbedding>(*c.rotary);
  if (c.rotary_local) rotary_local_ = std::make_shared<ops::RotaryEmbedding>(*c.rotary_local);
  if (c.pooler) pooler = register_module("pooler", torch::nn::Linear(c.hidden, c.hidden));
  // Pruned heads the config records (a saved pruned model); prune_heads records them again.
  const HeadIndices pruned = c.pruned_heads, pruned_cross = c.pruned_cross_heads;
  config_.pruned_heads.clear();
  config_.pruned_cross_heads.clear();
  prune_heads(pruned, AttentionSite::Self);
  prune_heads(pruned_cross, AttentionSite::Cross);
  reset_parameters();
}

namespace {

// Every descendant module (modules() needs shared_from_this, unavailable in a constructor).
void collect_descendants(const torch::nn::Module& module,
                         std::vector<std::shared_ptr<torch::nn::Module>>& out) {
  for (const auto& child : module.children()) {
    out.push_back(child);
    collect_descendants(*child, out);
  }
}

}  // namespace

void TransformerModelImpl::reset_parameters(double std) {
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<torch::nn::Module>> all;
  collect_descendants(*this, all);
  // Dense and embedding weights first; then the LayerNorms, which also zero their condition
  // layers. Attention-specific parameters (talking-heads, synthesizer) keep their own init.
  for (const auto& module : all) {
    if (auto* linear = module->as<torch::nn::Linear>()) {
      linear->weight.normal_(0.0, std);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = module->as<torch::nn::Embedding>()) {
      embedding->weight.normal_(0.0, std);
    }
  }
  for (const auto& module : all) {
    if (auto* norm = module->as<layers::ConditionalLayerNorm>()) norm->reset_parameters();
    if (auto* attention = module->as<layers::MultiHeadAttention>()) attention->reset_norms();
  }
}

TransformerBlock TransformerModelImpl::block(int64_t layer) const {
  if (layer < 0 || layer >= config_.layers)
    throw Error(fmt::format("model: layer {} out of range [0, {})", layer, config_.layers));
  const int64_t index =
      config_.share_layers ? layer / (config_.layers / config_.layer_groups) : layer;
  return std::dynamic_pointer_cast<layers::TransformerBlockImpl>(blocks->ptr(index));
}

void TransformerModelImpl::unshare() {
  if (!config_.share_layers) return;
  // A fresh block per layer with the values of the block it shared (same options, same names).
  auto fresh = torch::nn::ModuleList();
  HeadIndices pruned, pruned_cross;
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    TransformerBlock copy(block_options(layer));
    copy->to(block(layer)->parameters().front().scalar_type());  // a float64 model stays float64
    copy->set_paths(block(layer)->paths());
    // The same heads removed as in the shared block, so the shapes match.
    const auto& removed = block(layer)->attention->pruned_heads();
    if (!removed.empty()) {
      copy->attention->prune_heads(removed);
      pruned[layer] = removed;
    }
    if (copy->cross_attention) {
      const auto& removed_cross = block(layer)->cross_attention->pruned_heads();
      if (!removed_cross.empty()) {
        copy->cross_attention->prune_heads(removed_cross);
        pruned_cross[layer] = removed_cross;
      }
    }
    const auto source = block(layer)->named_parameters();
    const auto source_buffers = block(layer)->named_buffers();
    torch::NoGradGuard no_grad;
    for (auto& item : copy->named_parameters()) item.value().copy_(source[item.key()]);
    // Buffers that were drawn at random (a fixed Synthesizer alignment) are shared state too.
    for (auto& item : copy->named_buffers()) item.value().copy_(source_buffers[item.key()]);
    fresh->push_back(copy);
  }
  blocks = replace_module("blocks", fresh);
  config_.share_layers = false;
  config_.layer_groups = 1;
  config_.pruned_heads = pruned;
  config_.pruned_cross_heads = pruned_cross;
}

layers::MultiHeadAttention TransformerModelImpl::attention(int64_t layer, AttentionSite site) const {
  auto b = block(layer);
  return site == AttentionSite::Self ? b->attention : b->cross_attention;
}

void TransformerModelImpl::prune_heads(const HeadIndices& heads, AttentionSite site) {
  const char* what = site == AttentionSite::Self ? "prune heads" : "prune cross-attention heads";
  if (site == AttentionSite::Cross && !config_.cross_attention && !heads.empty())
    throw Error(fmt::format("{}: the model has no cross attention", what));
  for (const auto& [index, list] : heads) {
    if (index < 0 || index >= block_count())
      throw Error(fmt::format("{}: layer {} outside [0, {})", what, index, block_count()));
    auto b = std::dynamic_pointer_cast<layers::TransformerBlockImpl>(blocks->ptr(index));
    auto mha = site == AttentionSite::Self ? b->attention : b->cross_attention;
    mha->prune_heads(list);
    auto& record = site == AttentionSite::Self ? config_.pruned_heads : config_.pruned_cross_heads;
    if (!mha->pruned_heads().empty()) record[index] = mha->pruned_heads();
  }
  // Gates set before refer to the old head numbering.
  (site == AttentionSite::Self ? self_gates_ : cross_gates_).clear();
  for (int64_t i = 0; i < block_count(); ++i) {
    auto b = std::dynamic_pointer_cast<layers::TransformerBlockImpl>(blocks->ptr(i));
    auto mha = site == AttentionSite::Self ? b->attention : b->cross_attention;
    if (mha) mha->set_head_gates(at::Tensor());
  }
}

void TransformerModelImpl::set_head_gates(const std::vector<at::Tensor>& gates, AttentionSite site) {
  if (site == AttentionSite::Cross && !config_.cross_attention)
    throw Error("head gates: the model has no cross attention");
  if (!gates.empty() && static_cast<int64_t>(gates.size()) != config_.layers)
    throw Error(fmt::format("head gates: expected one gate tensor per layer ({}), got {}",
                            config_.layers, gates.size()));
  for (size_t layer = 0; layer < gates.size(); ++layer) {
    const int64_t heads = attention(int64_t(layer), site)->heads();
    const auto& g = gates[layer];
    if (!g.defined() || g.dim() < 1 || g.dim() > 2 || g.size(-1) != heads)
      throw Error(fmt::format("head gates: layer {}: expected [{}] or [batch, {}]", layer, heads,
                              heads));
  }
  (site == AttentionSite::Self ? self_gates_ : cross_gates_) = gates;
  for (int64_t i = 0; i < block_count(); ++i) {
    auto b = std::dynamic_pointer_cast<layers::TransformerBlockImpl>(blocks->ptr(i));
    auto mha = site == AttentionSite::Self ? b->attention : b->cross_attention;
    if (mha) mha->set_head_gates(at::Tensor());
  }
}

std::vector<int64_t> TransformerModelImpl::heads_per_layer(AttentionSite site) const {
  std::vector<int64_t> out;
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    auto mha = attention(layer, site);
    out.push_back(mha ? mha->heads() : 0);
  }
  return out;
}

void TransformerModelImpl::set_paths(const layers::BlockPaths& paths) {
  for (int64_t i = 0; i < block_count(); ++i)
    std::dynamic_pointer_cast<layers::TransformerBlockImpl>(blocks->ptr(i))->set_paths(paths);
}

layers::BlockInputs TransformerModelImpl::block_inputs_of(const ModelInputs& in) const {
  if (!in.input_ids.defined() || in.input_ids.dim() != 2)
    throw Error("model: input_ids must be a [batch, n] int64 tensor");
  if (in.input_ids.scalar_type() != at::kLong)
    throw Error(fmt::format("model: input_ids must be int64, got {}",
                            c10::toString(in.input_ids.scalar_type())));
  layers::BlockInputs block_inputs;
  if (in.attention_mask) {
    if (in.attention_mask->sizes() != in.input_ids.sizes())
      throw Error(fmt::format("model: attention_mask must be [{}], got [{}]",
                              fmt::join(in.input_ids.sizes(), ", "),
                              fmt::join(in.attention_mask->sizes(), ", ")));
    block_inputs.self.key_padding = in.attention_mask->to(at::kBool);
  }
  block_inputs.self.mask = in.mask;
  // The positions attention sees (rotary kinds): the position ids, else offset + 0..n−1 (RoBERTa's
  // learned table numbers its rows from the padding id on; that stays the embeddings' affair).
  block_inputs.self.positions =
      in.position_ids ? *in.position_ids
                      : at::arange(in.position_offset, in.position_offset + in.input_ids.size(1),
                                   in.input_ids.options().dtype(at::kLong))
                            .unsqueeze(0);
  block_inputs.self.prefix_lengths = in.prefix_lengths;
  block_inputs.self.need_weights = in.output_attentions;
  block_inputs.self.need_head_contexts = in.output_head_contexts;
  block_inputs.need_cross_head_contexts = in.output_head_contexts && config_.cross_attention;
  block_inputs.memory = in.memory;
  block_inputs.memory_padding = in.memory_padding;
  block_inputs.condition = in.condition;
  return block_inputs;
}

const ops::RotaryTables& TransformerModelImpl::rotary_tables(RotaryCall& call, int64_t layer) {
  // Local tables where the model's own spec has a window (a linear override of a sliding layer,
  // whose window is gone, keeps its tables: its teacher's, for attention transfer).
  const auto& c = config_;
  const int64_t window = c.layer_windows.empty() || layer >= static_cast<int64_t>(c.layer_windows.size())
                             ? c.attention.window
                             : c.layer_windows[static_cast<size_t>(layer)];
  const bool local = rotary_local_ && window > 0;
  ops::RotaryTables& tables = local ? call.local : call.global;
  if (!tables.cos.defined() && rotary_)
    tables = (local ? rotary_local_ : rotary_)->tables(call.positions);
  return tables;
}

void TransformerModelImpl::set_depth_gates(int64_t layer) {
  // Per-depth gates (shared blocks serve several depths).
  if (!self_gates_.empty()) block(layer)->attention->set_head_gates(self_gates_[layer]);
  if (!cross_gates_.empty()) block(layer)->cross_attention->set_head_gates(cross_gates_[layer]);
}

void TransformerModelImpl::record_layer(const ModelInputs& in, const layers::BlockInputs& block_inputs,
                                        const layers::BlockOutput& b, ModelOutput& out) const {
  if (in.output_attentions) out.attentions.push_back(b.weights);
  if (in.output_head_contexts) out.head_contexts.push_back(b.head_contexts);
  if (block_inputs.need_cross_head_contexts) out.cross_head_contexts.push_back(b.cross_head_contexts);
  if (in.output_hidden_states) out.hidden_states.push_back(b.hidden);
}

void TransformerModelImpl::finish(const ModelInputs& in, at::Tensor h, ModelOutput& out) {
  if (final_norm) {
    h = final_norm->forward(h, in.condition);
    // HF GPT-2 reports the final-LN output as the last hidden state.
    if (in.output_hidden_states) out.hidden_states.back() = h;
  }
  out.last_hidden_state = h;
  if (pooler) out.pooled = torch::tanh(pooler->forward(h.select(1, 0)));
}

StackCache TransformerModelImpl::start_decoding(const CacheFactory& caches, int64_t batch,
                                                int64_t horizon,
                                                const c10::optional<at::Tensor>& memory,
                                                const c10::optional<at::Tensor>& memory_padding,
                                                const c10::optional<at::Tensor>& condition) {
  if (horizon <= 0) throw Error(fmt::format("decode: horizon must be positive, got {}", horizon));
  if (config_.cross_attention && !memory)
    throw Error("decode: the model has cross attention; give the encoder memory");
  if (condition && (condition->dim() != 2 || condition->size(0) != batch))
    throw Error(fmt::format("decode: condition must be [{}, condition_size]", batch));
  StackCache cache;
  cache.horizon = horizon;
  cache.condition = condition;
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    auto b = block(layer);
    cache.self.push_back(caches.self_attention(*b->attention, horizon));
    if (b->cross_attention)
      cache.cross.push_back(caches.cross_attention(*b->cross_attention, *memory, memory_padding));
  }
  return cache;
}

at::Tensor TransformerModelImpl::step(StackCache& cache, const at::Tensor& ids,
                                      const layers::StepInputs& s,
                                      const c10::optional<at::Tensor>& token_types) {
  if (ids.dim() != 2 || !s.valid.defined() || !s.positions.defined() ||
      s.valid.sizes() != ids.sizes() || s.positions.sizes() != ids.sizes())
    throw Error("decode: ids, valid and positions must all be [batch, n]");
  if (static_cast<int64_t>(cache.self.size()) != config_.layers ||
      (config_.cross_attention && static_cast<int64_t>(cache.cross.size()) != config_.layers))
    throw Error("decode: the decoding state was made for another model");
  // One row: the dense layers run attnkit's gemv on LibTorch's threads (layers/row_linear.h); the
  // small products left (attention over the cache, the feature sums) run on the calling thread
  // rather than wake OpenBLAS's own pool, whose spinning workers would compete with LibTorch's.
  std::optional<ops::cpu::SingleThreadedBlas> one_pool;
  if (ids.numel() == 1) one_pool.emplace();
  at::Tensor h = embeddings->forward(ids, token_types, 0, cache.condition, s.positions);
  RotaryCall rotary{s.positions, {}, {}};
  layers::StepInputs with_rotary = s;
  // One column per row through blocks that all take the fused step (layers/fused_step.h): the
  // hidden state is updated in place, in a buffer of its own.
  bool fused = ids.size(1) == 1 && !cache.condition && self_gates_.empty() && cross_gates_.empty() &&
               layers::fused_step_enabled();
  const auto caches_of = [&](int64_t layer) {
    layers::BlockCaches caches;
    caches.self = cache.self[layer].get();
    if (config_.cross_attention) caches.cross = cache.cross[layer].get();
    return caches;
  };
  std::vector<layers::FusedBlockPlan> plans;
  if (fused) {
    h = h.contiguous();
    plans.resize(static_cast<size_t>(config_.layers));
    for (int64_t layer = 0; fused && layer < config_.layers; ++layer) {
      with_rotary.rotary = rotary_tables(rotary, layer);
      fused = layers::fused_block_ready(*block(layer), caches_of(layer), h, with_rotary,
                                        plans[static_cast<size_t>(layer)]);
    }
    if (fused) h = h.clone();
  }
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    with_rotary.rotary = rotary_tables(rotary, layer);
    if (fused) {
      layers::fused_block_step(*block(layer), caches_of(layer), h, with_rotary, plans[static_cast<size_t>(layer)]);
      continue;
    }
    set_depth_gates(layer);
    h = block(layer)->step(h, with_rotary, caches_of(layer), cache.condition);
  }
  if (final_norm) h = final_norm->forward(h, cache.condition);
  cache.length += ids.size(1);
  return h;
}

ModelOutput TransformerModelImpl::forward(const ModelInputs& in) {
  ModelOutput out;
  layers::BlockInputs block_inputs = block_inputs_of(in);
  at::Tensor h = embeddings->forward(in.input_ids, in.token_type_ids, in.position_offset,
                                     in.condition, in.position_ids);
  if (in.output_hidden_states) out.hidden_states.push_back(h);
  RotaryCall rotary{*block_inputs.self.positions, {}, {}};
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    set_depth_gates(layer);
    block_inputs.self.rotary = rotary_tables(rotary, layer);
    layers::BlockOutput b = block(layer)->forward(h, block_inputs);
    h = b.hidden;
    record_layer(in, block_inputs, b, out);
  }
  finish(in, h, out);
  return out;
}

TwoStreamOutput TransformerModelImpl::two_stream_forward(const ModelInputs& in, const at::Tensor& query_vector,
                                                         const at::Tensor& query_mask) {
  if (config_.cross_attention)
    throw Error("two-stream attention: the model's blocks have cross attention (an encoder-decoder's "
                "decoder); it takes a single stack of self-attention blocks");
  if (in.prefix_lengths)
    throw Error("two-stream attention: give the content stream's mask as `mask`, not as prefix_lengths");
  if (rotary_) throw Error("two-stream attention: the model has rotary positions (XLNet's streams take learned or sinusoidal ones)");
  const int64_t E = config_.effective_embedding_size();
  if (!query_vector.defined() || query_vector.dim() != 1 || query_vector.size(0) != E)
    throw Error(fmt::format("two-stream attention: the query stream's start vector must be [{}]", E));
  if (!query_mask.defined() || query_mask.scalar_type() != at::kBool)
    throw Error("two-stream attention: the query mask must be a bool tensor [batch|1, 1|heads, n, n]");
  TwoStreamOutput out;
  const layers::BlockInputs block_inputs = block_inputs_of(in);
  layers::AttentionInputs query_inputs;  // queries from g, keys and values from the content stream
  query_inputs.mask = query_mask;
  query_inputs.key_padding = block_inputs.self.key_padding;
  at::Tensor h = embeddings->forward(in.input_ids, in.token_type_ids, in.position_offset,
                                     in.condition, in.position_ids);
  at::Tensor g = embeddings->forward_vectors(
      query_vector.view({1, 1, E}).expand({in.input_ids.size(0), in.input_ids.size(1), E}),
      in.token_type_ids, in.position_offset, in.condition, in.position_ids);
  if (in.output_hidden_states) out.content.hidden_states.push_back(h);
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    set_depth_gates(layer);
    auto b = block(layer);
    // The content stream's attention input (its LayerNorm output in pre-LN blocks): the keys and
    // values both streams read in this layer.
    at::Tensor content_input;
    layers::BlockSublayers content, query;
    content.self_attention = [&](const at::Tensor& x) {
      content_input = x;
      return b->attention->forward(x, block_inputs.self);
    };
    content.feed_forward = [&](const at::Tensor& x) { return b->ffn->forward(x); };
    query.self_attention = [&](const at::Tensor& x) {
      return b->attention->forward(x, query_inputs, content_input);
    };
    query.feed_forward = content.feed_forward;
    layers::BlockOutput c = b->forward(h, block_inputs, content);
    g = b->forward(g, block_inputs, query).hidden;
    h = c.hidden;
    record_layer(in, block_inputs, c, out.content);
  }
  finish(in, h, out.content);
  out.query = final_norm ? final_norm->forward(g, in.condition) : g;
  return out;
}

int64_t parameter_count(const torch::nn::Module& module) {
  std::unordered_set<const void*> seen;
  int64_t count = 0;
  for (const auto& p : module.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) count += p.numel();
  return count;
}

at::Tensor final_logits(at::Tensor logits, const TransformerConfig& config) {
  const double cap = config.final_logit_softcap;
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

const at::Tensor& lm_head_weight(const at::Tensor& own_head, const TransformerModelImpl& model) {
  return own_head.defined() ? own_head : model.word_embeddings();
}

}  // namespace attnkit::models
