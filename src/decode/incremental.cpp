#include "attnkit/decode/incremental.h"

#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/head_gates.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/softmax_attention.h"
#include "../ops/cpu/blas.h"
#include "row_linear.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

namespace attnkit::decode {
namespace {

// Same constant as the parallel feature-map ops (src/ops/feature_attention.h, not public).
constexpr double kFeatureEpsilon = 1e-6;
// Columns per block when a feature-map state consumes a long chunk (bounds the [c, c] scores).
constexpr int64_t kFeatureBlock = 128;

using layers::MultiHeadAttentionImpl;

// [B, n, H·d] -> [B, H, n, d]
at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, -1}).transpose(1, 2);
}

// buffer.index_select(0, index) for a cache buffer preallocated to the horizon along `dim`, of
// which the first `length` columns are filled: only those are copied (a beam search reorders the
// cache at every step; the columns past `length` are written before they are read).
at::Tensor select_filled(const at::Tensor& buffer, const at::Tensor& index, int64_t dim,
                         int64_t length) {
  std::vector<int64_t> sizes = buffer.sizes().vec();
  sizes[0] = index.numel();
  at::Tensor out = at::empty(sizes, buffer.options());
  if (length > 0) {
    at::Tensor filled = out.narrow(dim, 0, length);
    at::index_select_out(filled, buffer.narrow(dim, 0, length), 0, index);
  }
  return out;
}

// Head gates, merge heads, output projection: the end of MultiHeadAttentionImpl::forward.
at::Tensor finish(MultiHeadAttentionImpl& attention, at::Tensor context) {
  if (attention.head_gates().defined())
    context = ops::apply_head_gates(context, attention.head_gates().to(context.dtype()));
  const int64_t B = context.size(0), n = context.size(2);
  at::Tensor merged =
      context.transpose(1, 2).reshape({B, n, attention.heads() * attention.value_size()});
  return linear_rows(attention.o, merged);
}

void check_step(const MultiHeadAttentionImpl& attention, const at::Tensor& x,
                const at::Tensor& valid) {
  if (x.dim() != 3 || x.size(2) != attention.options().hidden())
    throw Error(fmt::format("decode: attention input must be [batch, n, {}], got [{}]",
                            attention.options().hidden(), fmt::join(x.sizes(), ", ")));
  if (valid.dim() != 2 || valid.size(0) != x.size(0) || valid.size(1) != x.size(1))
    throw Error(fmt::format("decode: valid must be [{}, {}], got [{}]", x.size(0), x.size(1),
                            fmt::join(valid.sizes(), ", ")));
}

// The new columns' queries, keys and values per head ([batch, heads, n, size] each).
struct HeadProjections {
  at::Tensor q, k, v;
};
HeadProjections project_heads(MultiHeadAttentionImpl& attention, const at::Tensor& x) {
  const int64_t H = attention.heads();
  auto qkv = linear_rows(x, {{attention.q->weight, attention.q->bias},
                             {attention.k->weight, attention.k->bias},
                             {attention.v->weight, attention.v->bias}});
  return {split_heads(qkv[0], H), split_heads(qkv[1], H), split_heads(qkv[2], H)};
}

void check_horizon(int64_t length, int64_t n, int64_t horizon) {
  if (length + n > horizon)
    throw Error(fmt::format("decode: column {} is beyond the horizon of {} columns the state was "
                            "made for (prompt + max new tokens)",
                            length + n, horizon));
}

// ---- softmax: KV cache ----------------------------------------------------------------------
class KVCache : public AttentionState {
 public:
  explicit KVCache(int64_t horizon) : horizon_(horizon) {}

  at::Tensor step(MultiHeadAttentionImpl& attention, const at::Tensor& x, const at::Tensor& valid,
                  bool causal) override {
    check_step(attention, x, valid);
    const int64_t B = x.size(0), n = x.size(1), H = attention.heads();
    check_horizon(length_, n, horizon_);
    auto [qh, kh, vh] = project_heads(attention, x);
    if (!keys_.defined()) {
      keys_ = at::empty({B, H, horizon_, kh.size(3)}, kh.options());
      values_ = at::empty({B, H, horizon_, vh.size(3)}, vh.options());
      valid_ = at::zeros({B, horizon_}, valid.options().dtype(at::kBool));
    }
    keys_.narrow(2, length_, n).copy_(kh);
    values_.narrow(2, length_, n).copy_(vh);
    valid_.narrow(1, length_, n).copy_(valid.to(at::kBool));
    length_ += n;
    at::Tensor k_all = keys_.narrow(2, 0, length_), v_all = values_.narrow(2, 0, length_);
    at::Tensor mask = ops::padding_mask(valid_.narrow(1, 0, length_));  // [B, 1, 1, T]
    at::Tensor context = ops::softmax_attention(qh, k_all, v_all, mask, causal);
    return finish(attention, context);
  }

  void select_rows(const at::Tensor& index) override {
    if (!keys_.defined()) return;
    keys_ = select_filled(keys_, index, 2, length_);
    values_ = select_filled(values_, index, 2, length_);
    valid_ = select_filled(valid_, index, 1, length_);
  }
  int64_t length() const override { return length_; }
  int64_t bytes() const override {
    if (!keys_.defined()) return 0;
    // What the columns so far use (the buffer is preallocated to the horizon).
    return (keys_.size(0) * keys_.size(1) * (keys_.size(3) + values_.size(3)) * length_) *
           static_cast<int64_t>(keys_.element_size());
  }
  std::string name() const override { return "kv-cache"; }

 private:
  int64_t horizon_ = 0, length_ = 0;
  at::Tensor keys_, values_, valid_;
};

// ---- linear attention and cosFormer: fixed-size sums ----------------------------------------
class FeatureState : public AttentionState {
 public:
  FeatureState(bool cosformer, int64_t horizon) : cosformer_(cosformer), horizon_(horizon) {}

  at::Tensor step(MultiHeadAttentionImpl& attention, const at::Tensor& x, const at::Tensor& valid,
                  bool causal) override {
    check_step(attention, x, valid);
    const int64_t B = x.size(0), n = x.size(1), H = attention.heads();
    check_horizon(length_, n, horizon_);
    auto [qh, kh, vh] = project_heads(attention, x);
    at::Tensor phi_q, phi_k;
    if (cosformer_) {
      // Column c (0-based) sits at position c + 1, angle π/2 · (c + 1) / M with M = horizon.
      at::Tensor angles = ops::cosformer_angles(n, length_, horizon_, qh.scalar_type());
      phi_q = ops::cosformer_features(qh, angles);
      phi_k = ops::cosformer_features(kh, angles);
    } else {
      phi_q = attention.feature_map()->apply(qh);
      phi_k = attention.feature_map()->apply(kh);
    }
    // Padding is never a key.
    phi_k = phi_k * valid.to(phi_k.scalar_type()).view({B, 1, n, 1});
    at::Tensor v1 = at::cat({vh, at::ones_like(vh.narrow(3, 0, 1))}, 3);  // [B, H, n, dv + 1]
    if (!sums_.defined())
      sums_ = at::zeros({B, H, phi_k.size(3), v1.size(3)}, v1.options());
    if (!causal) {
      // A bidirectional segment (a UniLM source, a prefix-LM prefix): every new column sees all
      // of them and everything before; the sums then hold the prefix summary that the causal
      // columns after it start from (ops::prefix_linear_attention's recurrent form).
      sums_ = sums_ + at::matmul(phi_k.transpose(-2, -1), v1);
      at::Tensor read = at::matmul(phi_q, sums_);
      const int64_t dv = vh.size(3);
      at::Tensor den = read.narrow(3, dv, 1);
      den = cosformer_ ? den.clamp_min(kFeatureEpsilon) : den + kFeatureEpsilon;
      length_ += n;
      return finish(attention, read.narrow(3, 0, dv) / den);
    }
    std::vector<at::Tensor> reads;
    for (int64_t start = 0; start < n; start += kFeatureBlock) {
      const int64_t c = std::min(kFeatureBlock, n - start);
      at::Tensor fq = phi_q.narrow(2, start, c), fk = phi_k.narrow(2, start, c);
      at::Tensor vb = v1.narrow(2, start, c);
      at::Tensor read = at::matmul(fq, sums_);  // the columns before this block
      if (c == 1) {
        read = read + at::matmul(fq, fk.transpose(-2, -1)) * vb;
      } else {
        at::Tensor scores = at::matmul(fq, fk.transpose(-2, -1)).tril();  // key j <= query i
        read = read + at::matmul(scores, vb);
      }
      sums_ = sums_ + at::matmul(fk.transpose(-2, -1), vb);
      reads.push_back(read);
    }
    at::Tensor read = reads.size() == 1 ? reads[0] : at::cat(reads, 2);
    const int64_t dv = vh.size(3);
    at::Tensor den = read.narrow(3, dv, 1);
    den = cosformer_ ? den.clamp_min(kFeatureEpsilon) : den + kFeatureEpsilon;
    length_ += n;
    return finish(attention, read.narrow(3, 0, dv) / den);
  }

  void select_rows(const at::Tensor& index) override {
    if (sums_.defined()) sums_ = sums_.index_select(0, index);
  }
  int64_t length() const override { return length_; }
  int64_t bytes() const override {
    return sums_.defined() ? sums_.numel() * static_cast<int64_t>(sums_.element_size()) : 0;
  }
  std::string name() const override { return cosformer_ ? "cosformer-state" : "linear-state"; }

 private:
  bool cosformer_;
  int64_t horizon_ = 0, length_ = 0;
  at::Tensor sums_;  // [B, H, m, dv + 1]
};

}  // namespace

std::unique_ptr<AttentionState> make_state(const layers::MultiHeadAttentionImpl& attention,
                                           int64_t horizon) {
  if (horizon <= 0) throw Error(fmt::format("decode: horizon must be positive, got {}", horizon));
  const auto& spec = attention.options().spec();
  if (spec.talking_heads)
    throw Error("decode: talking-heads attention has no incremental form in attnkit (softmax, "
                "linear and cosformer kinds decode incrementally)");
  switch (spec.kind) {
    case AttentionKind::Softmax:
      return std::make_unique<KVCache>(horizon);
    case AttentionKind::Linear:
      return std::make_unique<FeatureState>(false, horizon);
    case AttentionKind::Cosformer:
      return std::make_unique<FeatureState>(true, horizon);
    default:
      throw Error(fmt::format("decode: attention kind '{}' has no incremental form in attnkit "
                              "(softmax, linear and cosformer kinds decode incrementally)",
                              spec.to_string()));
  }
}

// ---- cross attention ------------------------------------------------------------------------
CrossAttentionCache::CrossAttentionCache(layers::MultiHeadAttentionImpl& attention,
                                         const at::Tensor& memory,
                                         const c10::optional<at::Tensor>& memory_padding)
    : padding_(memory_padding) {
  const auto& spec = attention.options().spec();
  const int64_t H = attention.heads();
  if (spec.talking_heads ||
      (spec.kind != AttentionKind::Softmax && spec.kind != AttentionKind::Linear &&
       spec.kind != AttentionKind::Cosformer))
    throw Error(fmt::format("decode: cross attention kind '{}' has no cached form in attnkit",
                            spec.to_string()));
  if (spec.causal) throw Error("decode: causal cross attention is not supported");
  keys_ = split_heads(linear_rows(attention.k, memory), H);
  values_ = split_heads(linear_rows(attention.v, memory), H);
  if (padding_) padding_ = padding_->to(at::kBool);
  row_ids_.resize(static_cast<size_t>(keys_.size(0)));
  for (size_t b = 0; b < row_ids_.size(); ++b) row_ids_[b] = static_cast<int64_t>(b);
}

at::Tensor CrossAttentionCache::forward(layers::MultiHeadAttentionImpl& attention,
                                        const at::Tensor& x) {
  const auto& spec = attention.options().spec();
  if (spec.kind != AttentionKind::Softmax && spec.kind != AttentionKind::Linear)
    // cosFormer cross attention places query i at position i + 1 of the target: the query's
    // angle depends on the target length, so it is computed per call over the cached keys.
    throw Error("decode: cosFormer cross attention depends on the target length (M = max(L, "
                "S)) and has no cached form; use softmax or linear cross attention");
  const int64_t H = attention.heads();
  const at::Tensor q = linear_rows(attention.q, x).contiguous();  // [R, n, H·d]
  const int64_t R = q.size(0), n = q.size(1), U = keys_.size(0);
  // Rows i·G .. i·G + G − 1 all reading stored row i (the beams of source i, or G = 1): their
  // queries are one block of G·n rows against that row's keys, which are read once, not G times.
  int64_t G = U > 0 && R % U == 0 ? R / U : 0;
  for (int64_t r = 0; G > 0 && r < R; ++r)
    if (row_ids_[static_cast<size_t>(r)] != r / G) G = 0;
  at::Tensor keys = keys_, values = values_;
  c10::optional<at::Tensor> padding = padding_;
  if (G == 0) {  // any other arrangement: this step's rows gathered
    G = 1;
    const at::Tensor ids = at::tensor(row_ids_, at::kLong);
    keys = keys_.index_select(0, ids);
    values = values_.index_select(0, ids);
    if (padding) padding = padding->index_select(0, ids);
  }
  const int64_t blocks = R / G;
  const at::Tensor qh = q.view({blocks, G * n, H, -1}).transpose(1, 2);  // [blocks, H, G·n, d]
  at::Tensor context;
  if (spec.kind == AttentionKind::Softmax) {
    c10::optional<at::Tensor> mask;
    if (padding) mask = ops::padding_mask(*padding);
    context = ops::softmax_attention(qh, keys, values, mask, false);
  } else {
    context = ops::linear_attention(qh, keys, values, *attention.feature_map(), false, padding);
  }
  // [blocks, H, G·n, dv] -> [R, H, n, dv]
  const int64_t dv = context.size(3);
  context = context.transpose(1, 2).reshape({R, n, H, dv}).transpose(1, 2);
  return finish(attention, context);
}

void CrossAttentionCache::select_rows(const at::Tensor& index) {
  const at::Tensor rows = index.to(at::kCPU, at::kLong).contiguous().view({-1});
  const int64_t* r = rows.data_ptr<int64_t>();
  const auto B = static_cast<int64_t>(row_ids_.size());
  std::vector<int64_t> ids(static_cast<size_t>(rows.numel()));
  for (int64_t i = 0; i < rows.numel(); ++i) {
    if (r[i] < 0 || r[i] >= B)
      throw Error(fmt::format("decode: select_rows: row {} is outside [0, {})", r[i], B));
    ids[static_cast<size_t>(i)] = row_ids_[static_cast<size_t>(r[i])];
  }
  row_ids_ = std::move(ids);
}

// ---- the model ------------------------------------------------------------------------------
IncrementalModel::IncrementalModel(models::TransformerModel model, int64_t batch, int64_t horizon,
                                   const c10::optional<at::Tensor>& memory,
                                   const c10::optional<at::Tensor>& memory_padding,
                                   const c10::optional<at::Tensor>& condition)
    : model_(std::move(model)), horizon_(horizon), condition_(condition) {
  const auto& c = model_->config();
  if (horizon <= 0) throw Error(fmt::format("decode: horizon must be positive, got {}", horizon));
  if (c.cross_attention && !memory)
    throw Error("decode: the model has cross attention; give the encoder memory");
  if (condition_ && (condition_->dim() != 2 || condition_->size(0) != batch))
    throw Error(fmt::format("decode: condition must be [{}, condition_size]", batch));
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    auto block = model_->block(layer);
    self_.push_back(make_state(*block->attention, horizon));
    if (block->cross_attention)
      cross_.push_back(std::make_unique<CrossAttentionCache>(*block->cross_attention, *memory,
                                                             memory_padding));
  }
}

at::Tensor IncrementalModel::forward(const at::Tensor& ids, const at::Tensor& valid,
                                     const at::Tensor& positions,
                                     const c10::optional<at::Tensor>& token_types, bool causal) {
  if (ids.dim() != 2 || valid.sizes() != ids.sizes() || positions.sizes() != ids.sizes())
    throw Error("decode: ids, valid and positions must all be [batch, n]");
  const auto& c = model_->config();
  // One row: the dense layers run attnkit's gemv on LibTorch's threads (row_linear.h); the small
  // products left (attention over the cache, the feature sums) run on the calling thread rather
  // than wake OpenBLAS's own pool, whose spinning workers would compete with LibTorch's.
  std::optional<ops::cpu::SingleThreadedBlas> one_pool;
  if (ids.numel() == 1) one_pool.emplace();
  at::Tensor h = model_->embeddings->forward(ids, token_types, 0, condition_, positions);
  layers::BlockInputs inputs;  // the LayerNorms' condition; the sub-layers below hold the rest
  inputs.condition = condition_;
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    layers::TransformerBlockImpl& block = *model_->block(layer);
    // Per-depth head gates (TransformerModel::set_head_gates), as the uncached forward sets them.
    const auto& self_gates = model_->head_gates(models::AttentionSite::Self);
    const auto& cross_gates = model_->head_gates(models::AttentionSite::Cross);
    if (!self_gates.empty()) block.attention->set_head_gates(self_gates[layer]);
    if (!cross_gates.empty() && block.cross_attention)
      block.cross_attention->set_head_gates(cross_gates[layer]);
    AttentionState* state = self_[layer].get();
    // The block's residual / LayerNorm / paths sequence around the cached sub-layers.
    layers::BlockSublayers sublayers;
    sublayers.self_attention = [&block, state, &valid, causal](const at::Tensor& input) {
      layers::AttentionResult result;
      result.output = state->step(*block.attention, input, valid, causal);
      return result;
    };
    sublayers.skipped_self_attention = [&block, state, &valid, causal](const at::Tensor& input) {
      state->step(*block.attention, input, valid, causal);
    };
    if (block.cross_attention) {
      CrossAttentionCache* cross = cross_[layer].get();
      sublayers.cross_attention = [&block, cross](const at::Tensor& input) {
        layers::AttentionResult result;
        result.output = cross->forward(*block.cross_attention, input);
        return result;
      };
    }
    sublayers.feed_forward = [&block](const at::Tensor& input) {
      return feed_forward_rows(*block.ffn, input);
    };
    h = block.forward(h, inputs, sublayers).hidden;
  }
  if (model_->final_norm) h = model_->final_norm->forward(h, condition_);
  length_ += ids.size(1);
  return h;
}

void IncrementalModel::select_rows(const at::Tensor& index) {
  for (auto& s : self_) s->select_rows(index);
  for (auto& x : cross_) x->select_rows(index);
  if (condition_) condition_ = condition_->index_select(0, index);
}

int64_t IncrementalModel::state_bytes() const {
  int64_t total = 0;
  for (const auto& s : self_) total += s->bytes();
  return total;
}

at::Tensor positions_from_valid(const at::Tensor& valid) {
  at::Tensor v = valid.to(at::kLong);
  return (v.cumsum(1) - 1).clamp_min(0) * v;
}

}  // namespace attnkit::decode
