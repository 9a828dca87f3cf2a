// Decode attention: the attention of incremental generation, where a few new tokens' queries read a
// per-layer KV cache that already holds every earlier key and the new tokens' own.
//
//   q        [B, Tq, Hq, d]          the new tokens' queries (normed and rotated by the caller)
//   k_cache  [B, Hk, capacity, d]    head-major, so the keys of one head are contiguous
//   v_cache  [B, Hk, capacity, d]
//   length   valid cache entries, the new tokens' keys included (the same for every sequence);
//            Tq <= length <= capacity, and entries [length, capacity) are never read
// Hq = G * Hk: query head h reads KV head h / G. New query i (0 <= i < Tq) sits at absolute position
// p_i = length - Tq + i and attends causally to cache positions j <= p_i:
//   o_i = sum_{j <= p_i} softmax_j(q_i . k_j * scale) v_j.
// With MoDA depth slots (DESIGN.md 4.2), query i also reads the slots [begin, end) that earlier
// layers wrote at ITS OWN token, in the same softmax:
//   o_i = (sum_{j <= p_i} e^{a_j} v_j + sum_s e^{b_s} vd_{i,s}) / (sum e^{a_j} + sum e^{b_s}),
//   a_j = q_i . k_j * scale,  b_s = q_i . kd_{i,s} * scale,
// depth.k, depth.v [B, Tq, S, Hk, d] (the depth stream's rows of the new tokens). An empty slot range
// is plain attention (the depth tensors may then be undefined). With the cache holding a whole
// sequence of T tokens (length = T), o equals the last Tq rows of attention_forward (or of
// moda_attention_forward with the same slots).
// Returns o [B, Tq, Hq, d] in q's dtype. Forward only: generation needs no gradient.
// DTypes: one for all inputs: F32 or F64 on the CPU; BF16 or F32 on CUDA. The bf16 CUDA kernel
// (fp32 accumulation) takes head dims 64 and 128; F32 without depth slots runs the fp32 attention
// kernel (kernels/attention/attention_fp32.h); the rest is decoded by the CPU reference.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/moda/moda_attention.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                        const DepthSlots& depth, double scale);
inline Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                               double scale) {
  return decode_attention(q, k_cache, v_cache, length, DepthSlots{}, scale);
}
// The same with the lengths read from the device when the kernels run: past (I32 on q's device, host
// memory on the CPU) counts the positions held before this step, I32 [1] for every sequence or I32 [B]
// for each (sequence b's at b: a batch of prompts of different lengths), and sequence b attends over
// length_b = past_b + Tq (kernels/attention/kv_cache.h). So a decoding step captured as a CUDA graph
// attends over each replay's lengths. For every row the result is bit for bit what the overload above
// gives for that row's length (a [1] count: exactly the overload above). A CUDA kernel cannot throw:
// the caller checks its own counts (past_b + Tq <= capacity), and a larger one reads no further than the
// capacity; the CPU checks them and names the row.
Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                        const DepthSlots& depth, double scale);

// The most query rows a KV head (G * Tq) the bf16 kernel's few-rows split kernel takes; more take the tile kernel.
constexpr int64_t kDecodeRowsKernelMaxRows = 4;

// Who merges a few-rows launch's splits (decode_attention.cu, "Merge"): a combine kernel of its own, the last of a
// row block's splits to count itself on a global counter, or split 0 of a thread-block cluster holding the row
// block's splits. The outputs are the same bit for bit each way. The tile kernel (more rows) and launches with depth
// slots always leave the merge to the combine kernel.
enum class DecodeMerge { combine_kernel, counter, cluster };

// The counter: FATHOM_MERGE_IN_SPLIT=auto|always|never, read at the first call; unset, auto: where the grid has at
// least kMergeInSplitMinSplits splits, and the cluster does not take the launch (always: every launch the cluster
// does not take). On an H100 the counter took batch-1 steps at context 4096 (33 to 65 splits) 1.8-4.7% faster,
// steps of 3 splits (context 128) 0.2-1.4% slower, and batch 8 (3 to 9 splits) -1.2% to +2.1%
// (bench/results/2026-12-06_weight_ring_merge_swiglu_h100.md).
constexpr int64_t kMergeInSplitMinSplits = 16;
Usage merge_in_split_policy();
void set_merge_in_split_policy(Usage policy);
// Whether the policy in force gives a launch the counter, the cluster aside: rows_per_kv_head (G * Tq) within the
// few-rows kernel, no depth slots, and `always`, or `auto` with grid_splits (the launch's splits) at least
// kMergeInSplitMinSplits. A decoding step with a device-held length (a CUDA graph) has a grid sized for its cache's
// capacity, so there the rule sees the capacity, not each step's length.
bool merges_in_split(int64_t rows_per_kv_head, bool has_depth, int64_t grid_splits);

// The cluster, where each split of the launch reads at most kMergeInClusterMaxSplitTiles tiles of 64 positions and
// the grid has at most kMergeInClusterMaxSplits splits (the portable cluster size): short caches, where the merge's
// round trips are a large part of attention. Each split stores its partial into split 0's shared memory, which
// merges them after the cluster's barrier: no combine launch, no atomic, no global round trip.
// FATHOM_MERGE_IN_CLUSTER=on|off, read at the first call; unset: on. Needs compute capability 9.0 and a build for
// sm_90 (cuda::supports_sm90_launches). On an H100 it took a decoding step at context 128 (3 splits of one tile)
// from 0.435-0.439 to 0.423-0.426 ms at 190M and from 1.347-1.361 to 1.336 ms at 1B (a second 1B round, 1.401, ran
// beside a disturbed prefill), batch 8 1-3% faster; attention's cost a step (CUPTI) 97.0 -> 82.8 us at 190M, 165.3
// -> 150.5 at 1B. Alone, a launch at batch 1 over 128 or 512 positions ran 1.11-1.31x the combine kernel's speed,
// but at batch 32 over 512 to 64K positions (2 or 3 splits of several tiles) a GQA launch (4 rows a KV head) ran
// 0.78-0.85x and a 190M-like one down to 0.97x, hence the tile limit
// (bench/results/2026-12-07_cluster_merge_h100.md). In a whole decoding step the Llama-3.2-1B shape at batch 32,
// context 128 (256 blocks a split, twice the SMs) took 2.063-2.064 ms with the cluster against 1.977-1.984 without, and
// batch 8 (64 blocks) the same either way (bench/results/2026-12-07_llama_gpt_fast_h100.md), hence the block limit:
// at most as many blocks a split as SMs. Alone, that batch-32 launch had run 1.12x faster in a cluster, so the cost is
// in the step around it (likely: so many blocks fill the GPU without the merge's help, and clusters delay the launch
// that follows). OLMo2 at batch 32 (384 and 512 blocks), which the limit also moves to the combine kernel, neither
// gained nor lost by it (+0.4% and +0.6%, 95% intervals across zero;
// bench/results/2026-12-07_cluster_limit_and_sums_h100.md).
constexpr int64_t kMergeInClusterMaxSplits = 8;
constexpr int64_t kMergeInClusterMaxSplitTiles = 1;
Toggle merge_in_cluster_choice();
void set_merge_in_cluster_choice(Toggle choice);
// Whether the choice in force gives a launch the cluster: rows_per_kv_head within the few-rows kernel, no depth
// slots, grid_splits at most kMergeInClusterMaxSplits, split_tiles (the most tiles a split reads; with a
// device-held length, the capacity's) at most kMergeInClusterMaxSplitTiles, and split_blocks (a split's blocks: B Hk
// row blocks) at most the device's sm_count. The device's part is cuda::decode_attention_merge's.
bool merges_in_cluster(int64_t rows_per_kv_head, bool has_depth, int64_t grid_splits, int64_t split_tiles,
                       int64_t split_blocks, int sm_count);

namespace cuda {
// The merge the bf16 kernel's launch runs for B sequences, Hk KV heads and R = G * Tq query rows a KV head on
// `device` (benchmarks, tests): `length` is the sequences' length given on the host, or with device_held the
// cache's capacity (a device-held count, whose grid holds the most splits any length takes).
DecodeMerge decode_attention_merge(int64_t B, int64_t Hk, int64_t R, int64_t length, bool has_depth, bool device_held,
                                   Device device);
}  // namespace cuda

// The backends' decode attention: cpu::decode_attention, the reference, and cuda::decode_attention, split-K
// flash decoding in bf16 with fp32 accumulation for head dims 64 and 128 (kernels/attention/decode_attention.cu;
// the output comes from the device's allocator and the kernels run on its current stream).
using DecodeAttentionKernel = Tensor(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                                     const DepthSlots& depth, double scale);
using DecodeAttentionPastKernel = Tensor(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                         const Tensor& past, const DepthSlots& depth, double scale);
FATHOM_BACKENDS(DecodeAttentionKernel, decode_attention)
FATHOM_BACKENDS(DecodeAttentionPastKernel, decode_attention)

// The entry points the dispatch calls. The CPU runs the reference (reading past on the host, where it
// is). CUDA picks a kernel: the fp32 attention kernel for F32 without depth slots
// (kernels/attention/attention_fp32.h), the bf16 kernel above, and for the rest (bf16 at other head dims,
// such as the quickstart's 16, and F32 with depth slots) the reference on a host copy in f32 (with a
// count on the device, read there: a copy and a wait, which a graph capture refuses).
FATHOM_BACKENDS(DecodeAttentionKernel, run_decode_attention)
FATHOM_BACKENDS(DecodeAttentionPastKernel, run_decode_attention)

}  // namespace fathom
