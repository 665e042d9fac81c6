#pragma once
// The fused decoding step of one transformer block: one new column per row, float32, softmax
// attention over a KV cache (and over an encoder memory, for a decoder block), on raw buffers. What TransformerBlockImpl::step computes
// for such a block, without its ATen operations (the norms, the rotary rotation, the cache writes
// and masks, the residual sums, the activation: each allocates its output and goes through ATen's
// dispatch). The dense layers run the same kernels as linear_rows (kernel_rows_into), the
// attention the same flash kernel as ops::softmax_attention (ops/cpu/flash_attention_kernel.h),
// the elementwise parts are loops over a scratch buffer, and the block's output is written into
// the hidden state in place. Measured on the 2-core Zen 5 (AVX-512), `attnkit generate`, greedy:
// SmolLM2-135M float32 19.2-19.5 -> 17.1-17.3 ms a token at one thread, 14.2-14.6 -> 13.0-13.1
// at two (same ids); the 2-layer model of bench/decode_overhead.py 0.128 -> 0.082 ms.
//
// TransformerModelImpl::step takes it for every block of a step when fused_block_ready holds for
// all of them (else the blocks' own step runs, ATen's operations); ATTNKIT_FUSED_STEP=0 turns it
// off (read once; set_fused_step overrides, for tests comparing the two).
#include "attnkit/layers/attention_cache.h"
#include "attnkit/layers/transformer_block.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnkit::layers {

bool fused_step_enabled();
void set_fused_step(bool enabled);
// Block steps fused_block_step has run in this process (tests check which path ran).
int64_t fused_block_steps();

// Whether `block` with `caches` can take fused_block_step for hidden states `h` [rows, 1, hidden]
// and this step's inputs: no gradient mode; h float32 contiguous, 1 <= rows <= few_rows_max(); a
// pre- or post-norm block without sub-layer output norms, conditions or paths turned off;
// LayerNorm / RMSNorm / Gemma's RMSNorm of float32 weights; softmax self attention (not
// talking-heads) without head gates, LoRA adapters, q/k norms or groups pruned unevenly, float32
// (not int8) q, k, v, o; cross attention, where the block has it, softmax and ungrouped alike, over
// a memory cache whose memory_rows holds for these rows (each source's rows consecutive); a float32
// feed-forward (gated or not); rotary tables, if any, float32 [1 or rows, 1, width]; a self
// cache whose one_column holds (a float32 KV cache of these rows and sizes, room for the column).
// `plan` receives what the check found and the step uses: where the self cache takes the column,
// and the memory's keys and values.
struct FusedBlockPlan {
  KVColumn kv;
  MemoryRows memory;  // with cross attention only
};
bool fused_block_ready(TransformerBlockImpl& block, const BlockCaches& caches, const at::Tensor& h,
                       const StepInputs& step, FusedBlockPlan& plan);

// h [rows, 1, hidden] <- the block's output for it (in place): the step's column into the self
// cache. Call only with the plan of fused_block_ready, before the caches change.
void fused_block_step(TransformerBlockImpl& block, const BlockCaches& caches, at::Tensor& h,
                      const StepInputs& step, const FusedBlockPlan& plan);

}  // namespace attnkit::layers
