// MoDA attention on CUDA (DESIGN.md 4.2): every query row reads, in ONE softmax, its layer's causal
// sequence K/V and the depth slots [slot_begin, slot_end) that earlier layers wrote at its own token.
// Four kernels of increasing refinement, all with the same inputs, outputs and numerics contract
// (bf16 in, fp32 accumulation, fp32 log-sum-exp, deterministic backward):
//   naive: materialised scores (cuBLAS GEMMs into an fp32 score matrix, a softmax kernel);
//   flat:  flash-style, the depth columns walked as one flattened T*S axis with a same-token mask;
//   chunk: flash-style, a query tile walks only its own tokens' depth columns;
//   group: the G query heads of a KV head folded into the query axis (row r -> token r / G), so a
//          tile of C rows walks (C / G) * S depth columns; the production kernel.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/attention/flash_attention.h"

namespace fathom::cuda {

enum class ModaKernel { naive, flat, chunk, group };
const char* moda_kernel_name(ModaKernel kernel);

// The sequence geometry of flash attention plus the depth buffers' slot count S and the slot range
// read by this call. depth_k, depth_v: [B, T, S, Hk, d] (token-major, slot-minor). An empty range
// (slot_begin == slot_end) is plain causal attention.
struct ModaShape {
  FlashShape seq;
  int64_t slots = 0;
  int64_t slot_begin = 0, slot_end = 0;
};

struct ModaParams {
  ModaShape shape;
  const bf16* q = nullptr;  // [B, T, Hq, d]
  const bf16* k = nullptr;  // [B, T, Hk, d]
  const bf16* v = nullptr;
  const bf16* depth_k = nullptr;  // [B, T, S, Hk, d]
  const bf16* depth_v = nullptr;
  bf16* o = nullptr;          // [B, T, Hq, d]
  float* lse = nullptr;       // [B, Hq, T], natural log of the joint denominator of the scaled scores
  void* workspace = nullptr;  // moda_forward_workspace_bytes(kernel, shape), 16-byte aligned
  size_t workspace_bytes = 0;
};

struct ModaBackwardParams {
  ModaShape shape;
  const bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  const bf16* depth_k = nullptr;
  const bf16* depth_v = nullptr;
  const bf16* o = nullptr;
  const bf16* grad_o = nullptr;
  const float* lse = nullptr;
  bf16* dq = nullptr;
  bf16* dk = nullptr;  // sequence gradients, summed over the G query heads of each KV head
  bf16* dv = nullptr;
  // [B, T, S, Hk, d] fp32: the gradients of slots [slot_begin, slot_end) are ADDED here (several
  // readers share one buffer), or with store_depth_grads written over what the range held (the
  // first reader, which saves zeroing the range and reading it back); other slots are untouched.
  // Each element is updated by exactly one thread (the tile that owns its token), so repeated calls
  // are deterministic.
  float* d_depth_k = nullptr;
  float* d_depth_v = nullptr;
  bool store_depth_grads = false;
  // Or, set instead of the fp32 pair, bf16 buffers of the same shape that the gradients are stored
  // into (store_depth_grads must be set): one reader's fp32 sums rounded once, as dk and dv are, for a
  // caller whose depth K/V have no other reader. Adding into bf16 would round every reader's sum.
  bf16* d_depth_k_bf16 = nullptr;
  bf16* d_depth_v_bf16 = nullptr;
  // Or, set instead of any gradient buffer (group with G <= 16 only): the depth weights
  // [B, T, Hq, slot_end - slot_begin] fp32, written over: each row's probability p of each slot and
  // its score gradient times the scale (kernels/moda/moda_attention.h, DepthWeights).
  float* depth_weights_p = nullptr;
  float* depth_weights_ds = nullptr;
  void* workspace = nullptr;  // moda_backward_workspace_bytes(kernel, shape), 16-byte aligned
  size_t workspace_bytes = 0;
};

size_t moda_forward_workspace_bytes(ModaKernel kernel, const ModaShape& shape);
size_t moda_backward_workspace_bytes(ModaKernel kernel, const ModaShape& shape);

// Enqueue on `stream`; argument errors throw fathom::Error before anything is launched.
void moda_attention_forward(ModaKernel kernel, const ModaParams& params, cudaStream_t stream);
void moda_attention_backward(ModaKernel kernel, const ModaBackwardParams& params, cudaStream_t stream);
// Whether the group kernel's backward can return depth weights at G query heads per KV head and head
// dim d: its dQ walk must hold every row of a token in one m-tile (G <= 16).
bool moda_depth_weights_supported(int64_t G, int64_t d);

}  // namespace fathom::cuda
