#include "attnkit/decode/incremental.h"

#include "attnkit/error.h"
#include "attnkit/ops/cosformer_attention.h"
#include "attnkit/ops/linear_attention.h"
#include "attnkit/ops/masks.h"
#include "attnkit/ops/recurrent.h"
#include "attnkit/ops/rotary.h"
#include "attnkit/ops/softmax_attention.h"

#include "../ops/feature_attention.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace attnkit::decode {
namespace {

using layers::MultiHeadAttentionImpl;
using layers::StepInputs;

// buffer.index_select(0, index) for a cache buffer preallocated to the horizon along `dim`, of
// which the first `length` columns are filled: only those are copied (a beam search reorders the
// cache at every step; the columns past `length` are written before they are read).
// A contiguous buffer's filled columns are runs of length · inner elements, one per (row, outer
// index), copied with memcpy (ATen's index_select of the narrowed, strided view went through its
// element-wise iterator: 7% of a Marian beam-search profile). Returns `buffer` itself, changed in
// place, when that copies less.
at::Tensor select_filled(const at::Tensor& buffer, const at::Tensor& index, int64_t dim,
                         int64_t length) {
  if (length <= 0 || !buffer.is_contiguous() || dim < 1 || !buffer.device().is_cpu()) {
    std::vector<int64_t> sizes = buffer.sizes().vec();
    sizes[0] = index.numel();
    at::Tensor out = at::empty(sizes, buffer.options());
    if (length > 0) {
      at::Tensor filled = out.narrow(dim, 0, length);
      at::index_select_out(filled, buffer.narrow(dim, 0, length), 0, index);
    }
    return out;
  }
  const at::Tensor rows = index.to(at::kCPU, at::kLong).contiguous().view({-1});
  const int64_t* r = rows.data_ptr<int64_t>();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 1; d < dim; ++d) outer *= buffer.size(d);
  for (int64_t d = dim + 1; d < buffer.dim(); ++d) inner *= buffer.size(d);
  const int64_t element = static_cast<int64_t>(buffer.element_size());
  const int64_t slab = buffer.size(dim) * inner * element;  // one (row, outer) slab
  const size_t run = static_cast<size_t>(length * inner * element);
  const int64_t n = rows.numel();
  for (int64_t i = 0; i < n; ++i)
    if (r[i] < 0 || r[i] >= buffer.size(0))
      throw Error(fmt::format("decode: select_rows: row {} is outside [0, {})", r[i], buffer.size(0)));
  // In place when the rows keep their number and few move (a beam search's beams mostly keep
  // their own parent): only the moved rows are written, from copies of their sources.
  if (n == buffer.size(0) && buffer.storage().use_count() == 1) {
    std::vector<int64_t> moved, sources;
    std::vector<int64_t> slot(static_cast<size_t>(n), -1);  // a source's place in `sources`
    for (int64_t i = 0; i < n; ++i) {
      if (r[i] == i) continue;
      moved.push_back(i);
      if (slot[static_cast<size_t>(r[i])] < 0) {
        slot[static_cast<size_t>(r[i])] = static_cast<int64_t>(sources.size());
        sources.push_back(r[i]);
      }
    }
    if (moved.size() + sources.size() < static_cast<size_t>(n)) {
      auto* data = static_cast<char*>(buffer.data_ptr());
      std::vector<char> saved(sources.size() * static_cast<size_t>(outer) * run);
      for (size_t s = 0; s < sources.size(); ++s)
        for (int64_t o = 0; o < outer; ++o)
          std::memcpy(saved.data() + (s * static_cast<size_t>(outer) + static_cast<size_t>(o)) * run,
                      data + (sources[s] * outer + o) * slab, run);
      for (const int64_t i : moved) {
        const auto s = static_cast<size_t>(slot[static_cast<size_t>(r[i])]);
        for (int64_t o = 0; o < outer; ++o)
          std::memcpy(data + (i * outer + o) * slab,
                      saved.data() + (s * static_cast<size_t>(outer) + static_cast<size_t>(o)) * run, run);
      }
      return buffer;
    }
  }
  std::vector<int64_t> sizes = buffer.sizes().vec();
  sizes[0] = n;
  at::Tensor out = at::empty(sizes, buffer.options());
  const auto* from = static_cast<const char*>(buffer.data_ptr());
  auto* to = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(to + (i * outer + o) * slab, from + (r[i] * outer + o) * slab, run);
  return out;
}

void check_horizon(int64_t length, int64_t n, int64_t horizon) {
  if (length + n > horizon)
    throw Error(fmt::format("decode: column {} is beyond the horizon of {} columns the state was "
                            "made for (prompt + max new tokens)",
                            length + n, horizon));
}

// ---- softmax: KV cache ----------------------------------------------------------------------
// Keys and values of the grouped heads (kh.size(1): the key/value heads), the softmax op reads them
// grouped. Without a sliding window (or with one no shorter than the horizon) the buffers are
// preallocated to the horizon and column c sits at slot c. With a window w shorter than the
// horizon they are a ring of w slots, column c at slot c mod w: the last w columns are all a query
// can see (the window counts its own column), so the state is O(w) per layer.
class KVCache : public layers::AttentionCache {
 public:
  KVCache(int64_t horizon, int64_t window)
      : horizon_(horizon), window_(window > 0 && window < horizon ? window : 0),
        capacity_(window_ > 0 ? window_ : horizon) {}

  at::Tensor attend(const MultiHeadAttentionImpl& attention, const at::Tensor& qh,
                    const at::Tensor& kh, const at::Tensor& vh, const StepInputs& step) override {
    const int64_t B = kh.size(0), H = kh.size(1), n = kh.size(2);
    check_horizon(length_, n, horizon_);
    if (!keys_.defined()) {
      keys_ = at::empty({B, H, capacity_, kh.size(3)}, kh.options());
      values_ = at::empty({B, H, capacity_, vh.size(3)}, vh.options());
      valid_ = at::zeros({B, capacity_}, step.valid.options().dtype(at::kBool));
    }
    const auto& spec = attention.options().spec();
    const auto scale = spec.scale > 0 ? c10::optional<double>(spec.scale) : c10::nullopt;
    const at::Tensor valid = step.valid.to(at::kBool);
    if (window_ == 0) {
      keys_.narrow(2, length_, n).copy_(kh);
      values_.narrow(2, length_, n).copy_(vh);
      valid_.narrow(1, length_, n).copy_(valid);
      length_ += n;
      at::Tensor k_all = keys_.narrow(2, 0, length_), v_all = values_.narrow(2, 0, length_);
      at::Tensor mask = ops::padding_mask(valid_.narrow(1, 0, length_));  // [B, 1, 1, T]
      return ops::softmax_attention(qh, k_all, v_all, mask, step.causal, scale, {},
                                    ops::SoftmaxExtras{spec.window, spec.logit_softcap});
    }
    if (n == 1 && step.causal) {
      // One new column: it sees every column the ring holds once its own is in (the oldest,
      // w columns back, is overwritten), in any order, so the ring is attended as it lies.
      store(kh, vh, valid, 0, 1);
      length_ += 1;
      const int64_t filled = std::min(length_, capacity_);
      at::Tensor mask = ops::padding_mask(valid_.narrow(1, 0, filled));
      return ops::softmax_attention(qh, keys_.narrow(2, 0, filled), values_.narrow(2, 0, filled),
                                    mask, false, scale, {},
                                    ops::SoftmaxExtras{0, spec.logit_softcap});
    }
    // Several new columns (a prompt): the kept columns in order, then the new ones, under the
    // causal window; then the last w columns are kept.
    const int64_t kept = std::min(length_, capacity_ - 1);
    at::Tensor k_all = at::cat({in_order(keys_, 2, kept), kh}, 2);
    at::Tensor v_all = at::cat({in_order(values_, 2, kept), vh}, 2);
    at::Tensor mask = ops::padding_mask(at::cat({in_order(valid_, 1, kept), valid}, 1));
    at::Tensor out = ops::softmax_attention(qh, k_all, v_all, mask, step.causal, scale, {},
                                            ops::SoftmaxExtras{window_, spec.logit_softcap});
    const int64_t last = std::min(n, capacity_);
    store(kh, vh, valid, n - last, last);
    length_ += n;
    return out;
  }

  void select_rows(const at::Tensor& index) override {
    if (!keys_.defined()) return;
    const int64_t filled = std::min(length_, capacity_);
    keys_ = select_filled(keys_, index, 2, filled);
    values_ = select_filled(values_, index, 2, filled);
    valid_ = select_filled(valid_, index, 1, filled);
  }
  int64_t length() const override { return length_; }
  int64_t bytes() const override {
    if (!keys_.defined()) return 0;
    // What the columns kept so far use (the buffer is preallocated to the horizon, or the window).
    return (keys_.size(0) * keys_.size(1) * (keys_.size(3) + values_.size(3)) *
            std::min(length_, capacity_)) *
           static_cast<int64_t>(keys_.element_size());
  }
  std::string name() const override { return "kv-cache"; }

  bool one_column(layers::KVColumn& out) const override {
    if (!keys_.defined() || length_ + 1 > horizon_ || keys_.scalar_type() != at::kFloat ||
        values_.scalar_type() != at::kFloat || !keys_.is_contiguous() || !values_.is_contiguous() ||
        !valid_.is_contiguous() || !keys_.device().is_cpu())
      return false;
    out.keys = keys_.data_ptr<float>();
    out.values = values_.data_ptr<float>();
    out.valid = valid_.data_ptr<bool>();
    out.batch = keys_.size(0);
    out.kv_heads = keys_.size(1);
    out.capacity = capacity_;
    out.key_size = keys_.size(3);
    out.value_size = values_.size(3);
    // As attend() places one column: slot c (c mod w in a window's ring), then the prefix up to
    // it, or the whole filled ring.
    out.slot = length_ % capacity_;
    out.filled = std::min(length_ + 1, capacity_);
    return true;
  }
  void column_written() override { length_ += 1; }

 private:
  // New columns [from, from + count) of this step (count <= capacity) into their slots: column
  // c = length_ + t at slot c mod capacity (at most two runs of adjacent slots).
  void store(const at::Tensor& kh, const at::Tensor& vh, const at::Tensor& valid, int64_t from,
             int64_t count) {
    const int64_t slot = (length_ + from) % capacity_;
    const int64_t first = std::min(count, capacity_ - slot);
    const auto put = [&](int64_t t, int64_t at_slot, int64_t m) {
      keys_.narrow(2, at_slot, m).copy_(kh.narrow(2, t, m));
      values_.narrow(2, at_slot, m).copy_(vh.narrow(2, t, m));
      valid_.narrow(1, at_slot, m).copy_(valid.narrow(1, t, m));
    };
    put(from, slot, first);
    if (count > first) put(from + first, 0, count - first);
  }

  // The last `kept` stored columns of a ring buffer along `dim`, oldest first.
  at::Tensor in_order(const at::Tensor& ring, int64_t dim, int64_t kept) const {
    const int64_t start = ((length_ - kept) % capacity_ + capacity_) % capacity_;
    if (start + kept <= capacity_) return ring.narrow(dim, start, kept);
    return at::cat({ring.narrow(dim, start, capacity_ - start),
                    ring.narrow(dim, 0, kept - (capacity_ - start))},
                   dim);
  }

  int64_t horizon_ = 0, window_ = 0, capacity_ = 0, length_ = 0;
  at::Tensor keys_, values_, valid_;
};

// ---- linear attention and cosFormer: fixed-size sums ----------------------------------------
class FeatureState : public layers::AttentionCache {
 public:
  FeatureState(bool cosformer, int64_t horizon) : cosformer_(cosformer), horizon_(horizon) {}

  at::Tensor attend(const MultiHeadAttentionImpl& attention, const at::Tensor& qh,
                    const at::Tensor& kh, const at::Tensor& vh, const StepInputs& step) override {
    const int64_t B = kh.size(0), n = kh.size(2);
    check_horizon(length_, n, horizon_);
    at::Tensor phi_q, phi_k;
    if (cosformer_) {
      // Column c (0-based) sits at position c + 1, angle π/2 · (c + 1) / M with M = horizon.
      at::Tensor angles = ops::cosformer_angles(n, length_, horizon_, qh.scalar_type());
      phi_q = ops::cosformer_features(qh, angles);
      phi_k = ops::cosformer_features(kh, angles);
    } else {
      const ops::FeatureMap map = attention.feature_map();
      phi_q = map.apply(qh);
      phi_k = map.apply(kh);
    }
    // Padding is never a key.
    phi_k = phi_k * step.valid.to(phi_k.scalar_type()).view({B, 1, n, 1});
    at::Tensor out = step.rotary.cos.defined()
                         ? rotary_attend(phi_q, phi_k, vh, step)
                         : ops::feature_recurrence(sums_, phi_q, phi_k, vh, step.causal, cosformer_);
    length_ += n;
    return out;
  }

  void select_rows(const at::Tensor& index) override {
    for (at::Tensor* t : {&sums_, &numerator_, &denominator_})
      if (t->defined()) *t = t->index_select(0, index);
  }
  int64_t length() const override { return length_; }
  int64_t bytes() const override {
    int64_t total = 0;
    for (const at::Tensor* t : {&sums_, &numerator_, &denominator_})
      if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
    return total;
  }
  std::string name() const override { return cosformer_ ? "cosformer-state" : "linear-state"; }

 private:
  // Linear attention and cosFormer with rotary positions (RoFormer section 3.4;
  // ops::rotary_linear_attention, rotary_cosformer_attention): the rotation enters the numerator
  // only, so the state is two sums, the rotated numerator Σ_j (R_j φ(k_j)) v_jᵀ [B, H, m, dv] and
  // the unrotated denominator Σ_j φ(k_j) [B, H, m]. phi_q, phi_k: the new columns' features
  // (padding zeroed). Each new column sees the sums before the step and the new columns up to
  // itself (the causal-product kernel for the numerator, a running sum for the denominator).
  at::Tensor rotary_attend(const at::Tensor& phi_q, const at::Tensor& phi_k, const at::Tensor& vh,
                           const StepInputs& step) {
    if (!step.causal)  // a bidirectional segment (UniLM, prefix LM): the forward takes none either
      throw Error("decode: attention with rotary positions decodes causal columns only");
    const auto rotate = [&](const at::Tensor& phi) {
      if (!cosformer_) return ops::apply_rotary(phi, step.rotary);
      // cosFormer's φ = [ReLU(x)·cos, ReLU(x)·sin] with one angle per column: rotating ReLU(x)
      // before the re-weighting is rotating each half.
      const auto halves = phi.chunk(2, 3);
      return at::cat({ops::apply_rotary(halves[0], step.rotary), ops::apply_rotary(halves[1], step.rotary)}, 3);
    };
    const at::Tensor rq = rotate(phi_q), rk = rotate(phi_k);
    if (!numerator_.defined()) {
      numerator_ = at::zeros({phi_k.size(0), phi_k.size(1), phi_k.size(3), vh.size(3)}, vh.options());
      denominator_ = at::zeros({phi_k.size(0), phi_k.size(1), phi_k.size(3)}, vh.options());
    }
    at::Tensor numerator = at::matmul(rq, numerator_) + ops::detail::causal_product_forward(rq, rk, vh, false);
    at::Tensor denominator = (phi_q * (denominator_.unsqueeze(2) + phi_k.cumsum(2))).sum(3);
    numerator_ = numerator_ + at::matmul(rk.transpose(2, 3), vh);
    denominator_ = denominator_ + phi_k.sum(2);
    constexpr double eps = ops::detail::kFeatureAttentionEpsilon;  // linear adds it, cosFormer clamps
    denominator = cosformer_ ? denominator.clamp_min(eps) : denominator + eps;
    return numerator / denominator.unsqueeze(3);
  }

  bool cosformer_;
  int64_t horizon_ = 0, length_ = 0;
  at::Tensor sums_;                     // [B, H, m, dv + 1]
  at::Tensor numerator_, denominator_;  // with rotary positions (rotary_attend)
};

}  // namespace

std::unique_ptr<layers::AttentionCache> make_state(const layers::MultiHeadAttentionImpl& attention,
                                                   int64_t horizon) {
  if (horizon <= 0) throw Error(fmt::format("decode: horizon must be positive, got {}", horizon));
  const auto& spec = attention.options().spec();
  if (spec.talking_heads)
    throw Error("decode: talking-heads attention has no incremental form in attnkit (softmax, "
                "linear and cosformer kinds decode incrementally)");
  switch (spec.kind) {
    case AttentionKind::Softmax:
      return std::make_unique<KVCache>(horizon, spec.window);
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
  if (spec.talking_heads ||
      (spec.kind != AttentionKind::Softmax && spec.kind != AttentionKind::Linear &&
       spec.kind != AttentionKind::Cosformer))
    throw Error(fmt::format("decode: cross attention kind '{}' has no cached form in attnkit",
                            spec.to_string()));
  if (spec.causal) throw Error("decode: causal cross attention is not supported");
  std::tie(keys_, values_) = attention.memory_heads(memory);
  if (padding_) padding_ = padding_->to(at::kBool);
  row_ids_.resize(static_cast<size_t>(keys_.size(0)));
  for (size_t b = 0; b < row_ids_.size(); ++b) row_ids_[b] = static_cast<int64_t>(b);
}

at::Tensor CrossAttentionCache::attend(const layers::MultiHeadAttentionImpl& attention,
                                       const at::Tensor& q) {
  const auto& spec = attention.options().spec();
  if (spec.kind != AttentionKind::Softmax && spec.kind != AttentionKind::Linear)
    // cosFormer cross attention places query i at position i + 1 of the target: the query's
    // angle depends on the target length, so it is computed per call over the cached keys.
    throw Error("decode: cosFormer cross attention depends on the target length (M = max(L, "
                "S)) and has no cached form; use softmax or linear cross attention");
  const int64_t H = attention.heads();  // q: [R, n, H·d], contiguous
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
    context = ops::linear_attention(qh, keys, values, attention.feature_map(), false, padding);
  }
  // [blocks, H, G·n, dv] -> [R, H, n, dv]
  const int64_t dv = context.size(3);
  return context.transpose(1, 2).reshape({R, n, H, dv}).transpose(1, 2);
}

bool CrossAttentionCache::memory_rows(int64_t rows, layers::MemoryRows& out) const {
  if (keys_.scalar_type() != at::kFloat || values_.scalar_type() != at::kFloat || !keys_.device().is_cpu() ||
      !values_.device().is_cpu() || keys_.dim() != 4 || values_.dim() != 4 || keys_.stride(3) != 1 ||
      values_.stride(3) != 1)
    return false;
  const int64_t U = keys_.size(0);
  if (U == 0 || rows <= 0 || rows % U != 0 || static_cast<int64_t>(row_ids_.size()) != rows) return false;
  const int64_t G = rows / U;  // as attend() blocks them: the rows of memory row i consecutive
  for (int64_t r = 0; r < rows; ++r)
    if (row_ids_[static_cast<size_t>(r)] != r / G) return false;
  if (padding_) {
    const at::Tensor& p = *padding_;
    if (p.scalar_type() != at::kBool || p.dim() != 2 || p.size(0) != U || p.size(1) != keys_.size(2) ||
        p.stride(1) != 1 || !p.device().is_cpu())
      return false;
    out.padding = p.data_ptr<bool>();
    out.padding_stride = p.stride(0);
  }
  out.keys = keys_.data_ptr<float>();
  out.values = values_.data_ptr<float>();
  out.memory_rows = U;
  out.heads = keys_.size(1);
  out.length = keys_.size(2);
  out.key_size = keys_.size(3);
  out.value_size = values_.size(3);
  for (int d = 0; d < 3; ++d) {
    out.key_strides[d] = keys_.stride(d);
    out.value_strides[d] = values_.stride(d);
  }
  out.group = G;
  return true;
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

// ---- the factory and one stack's session -----------------------------------------------------
namespace {

class StateFactory : public models::CacheFactory {
 public:
  std::unique_ptr<layers::AttentionCache> self_attention(
      const layers::MultiHeadAttentionImpl& attention, int64_t horizon) const override {
    return make_state(attention, horizon);
  }
  std::unique_ptr<layers::MemoryCache> cross_attention(
      layers::MultiHeadAttentionImpl& attention, const at::Tensor& memory,
      const c10::optional<at::Tensor>& padding) const override {
    return std::make_unique<CrossAttentionCache>(attention, memory, padding);
  }
};

}  // namespace

const models::CacheFactory& caches() {
  static const StateFactory factory;
  return factory;
}

IncrementalModel::IncrementalModel(models::TransformerModel model, int64_t batch, int64_t horizon,
                                   const c10::optional<at::Tensor>& memory,
                                   const c10::optional<at::Tensor>& memory_padding,
                                   const c10::optional<at::Tensor>& condition)
    : model_(std::move(model)),
      cache_(model_->start_decoding(caches(), batch, horizon, memory, memory_padding, condition)) {}

at::Tensor IncrementalModel::forward(const at::Tensor& ids, const at::Tensor& valid,
                                     const at::Tensor& positions,
                                     const c10::optional<at::Tensor>& token_types, bool causal) {
  return model_->step(cache_, ids, {valid, positions, causal, {}}, token_types);
}

at::Tensor positions_from_valid(const at::Tensor& valid) {
  at::Tensor v = valid.to(at::kLong);
  return (v.cumsum(1) - 1).clamp_min(0) * v;
}

}  // namespace attnkit::decode
