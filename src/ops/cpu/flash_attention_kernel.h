#pragma once
// Flash-style softmax attention on the CPU: query tiles × key tiles with an online softmax, so the
// [L, S] score matrix never exists; the backward recomputes score tiles from the saved row
// log-sum-exp. Tile products go to BLAS (single-threaded inside our parallel loop); the
// elementwise softmax work is vectorised with runtime ISA dispatch. No LibTorch here.
#include <cstdint>

namespace attnkit::ops::cpu {

// One row of scores as the flash kernels compute them, s[c] = scale · Σ_i q[i]·k[c·ldk + i] for
// c < n (blocks of keys where the running copy has them), and the same one key at a time: both
// give the same bits in every instruction-set copy (tests/ops/flash_row_scores_test.cpp).
void attention_row_scores(const float* q, const float* k, int64_t ldk, int64_t n, int64_t d,
                          float scale, float* s);
void attention_row_scores_per_key(const float* q, const float* k, int64_t ldk, int64_t n, int64_t d,
                                  float scale, float* s);

constexpr int64_t kFlashQueryTile = 128;
constexpr int64_t kFlashKeyTile = 256;
// The forward alone runs larger tiles: fewer, larger BLAS calls and softmax passes (about 15%
// faster at n = 4096 without a mask). The backward keeps the smaller ones, where larger tiles
// cost more masked work on the causal diagonal than they save.
constexpr int64_t kFlashForwardQueryTile = 256;
constexpr int64_t kFlashForwardKeyTile = 512;

// An optional mask over [B, H, L, S] given by element strides (0 = broadcast). Either bool
// (true = attend) or additive in the attention dtype.
struct FlashMask {
  const bool* bool_data = nullptr;
  const void* additive_data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_l = 0, stride_s = 0;
};

// Where the rows of one [B, H, n, d] operand lie: element strides of its batch, head and position
// dimensions. The feature dimension is contiguous and a row stride is at least d (a BLAS leading
// dimension). Contiguous [B, H, n, d] is {H·n·d, n·d, d}; a [B, H, n, d] view of [B, n, H, d]
// storage (Hugging Face's transposed projections) is {n·H·d, d, H·d}. The kernels take every
// operand in place through these, so no layout is copied before them (the backward packs a
// strided operand's head inside the worker that owns it, see dense_rows).
struct FlashRows {
  int64_t b = 0, h = 0, n = 0;
  template <typename T>
  T* head(T* data, int64_t bi, int64_t hi) const {
    return data + bi * b + hi * h;
  }
};

struct FlashProblem {
  // H query heads; Hkv key/value heads (grouped-query attention), dividing H: query head h reads
  // key/value head h / (H / Hkv), in place (nothing is repeated). 0 = H.
  int64_t B = 0, H = 0, L = 0, S = 0, dk = 0, dv = 0, Hkv = 0;
  // Layouts: q [B,H,L,dk], k [B,Hkv,S,dk], v [B,Hkv,S,dv], out [B,H,L,dv] (forward and
  // backward); dout like out, dq like q, dk/dv like k/v (backward only). All must be set (the
  // callers in ops/flash_attention.cpp take them from the tensors' strides). lse is contiguous.
  FlashRows q_rows, k_rows, v_rows, out_rows, dout_rows, dq_rows, dk_rows, dv_rows;
  double scale = 1.0;
  bool causal = false;  // bottom-right aligned: query i sees keys j <= i + S − L
  // > 0: a sliding window, query i sees only keys j > i + S − L − window (with causal: the last
  // `window` columns up to its own). Key tiles outside every row's band are never visited, so the
  // cost is O(L · window), not O(L · S).
  int64_t window = 0;
  // > 0: scores -> cap · tanh(scores / cap) after the scale, before the mask (Gemma 2's
  // attn_logit_softcapping); the backward multiplies by 1 − tanh².
  double logit_softcap = 0.0;
  // The backward with grouped heads splits each key/value head's group of G query heads into
  // this many parts, one task each, whose dk/dv partial sums are added afterwards (G: one task per
  // query head; 1: one task per key/value head, no partial sums). 0 = chosen from the thread count.
  int64_t group_split = 0;
  int64_t kv_heads() const { return Hkv > 0 ? Hkv : H; }
  int64_t group() const { return H / kv_heads(); }
  FlashMask mask;
  double dropout = 0.0;        // attention-probability dropout rate in [0, 1)
  uint64_t dropout_seed = 0;   // with the element's position, decides keep/drop (see below)
};

// Counter-based dropout: whether weight (b·H + h, i, j) is kept is a pure function of the seed
// and the position (a SplitMix64 hash; keep iff its top 24 bits >= rate·2^24), so forward and
// backward, any tiling and any thread order drop the same weights, and the float64 oracle can
// rebuild the mask (ops::attention_dropout_keep). Kept weights are scaled by 1 / (1 − rate).
inline uint32_t dropout_threshold(double rate) {
  return static_cast<uint32_t>(rate * 16777216.0 + 0.5);
}
inline bool dropout_keep(uint64_t seed, int64_t bh, int64_t i, int64_t j, int64_t L, int64_t S,
                         uint32_t threshold) {
  uint64_t x = seed + static_cast<uint64_t>((bh * L + i) * S + j + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (x >> 40) >= threshold;
}

// Each entry point splits its (batch, head, query tile) work over the threads itself
// (parallel.h).

// q [B,H,L,dk], k [B,H,S,dk], v [B,H,S,dv] -> out [B,H,L,dv] (each laid out as p's FlashRows say),
// lse [B,H,L] contiguous
// (log Σ exp of each row's scores; -inf for a row with no visible key, whose output is 0).
void flash_attention_forward(const FlashProblem& p, const float* q, const float* k, const float* v,
                             float* out, float* lse);
void flash_attention_forward(const FlashProblem& p, const double* q, const double* k,
                             const double* v, double* out, double* lse);

// Gradients from dout [B,H,L,dv] and the forward's out and lse. dq, dk, dv are overwritten (only
// their rows: padding between strided rows is left alone); dk and dv of a key/value head sum the
// gradients of its group's query heads.
void flash_attention_backward(const FlashProblem& p, const float* q, const float* k,
                              const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv);
void flash_attention_backward(const FlashProblem& p, const double* q, const double* k,
                              const double* v, const double* out, const double* lse,
                              const double* dout, double* dq, double* dk, double* dv);

}  // namespace attnkit::ops::cpu
