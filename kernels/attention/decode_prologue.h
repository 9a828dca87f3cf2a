// A decoding step's attention prologue for one new token per sequence, in one launch: q and k through
// their full-width RMSNorms (OLMo2's QK-norm; none for Llama), both rotated by RoPE's angles, and the
// rotated k and v appended to the KV cache at each sequence's position. It is rms_norm_forward,
// rope_forward and kv_cache_write in turn (six launches a layer), and the CPU runs exactly those.
// decode_prologue_attention goes one launch further: the prologue inside attention's split kernel.
#pragma once

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

// The full-width QK-norms of q and k: weights [Hq d] and [Hk d] and their epsilons; both weights
// undefined for none.
struct QkNorm {
  Tensor q, k;
  double q_eps = 0, k_eps = 0;
};

// q [B, 1, Hq, d]; k, v [B, 1, Hk, d], one dtype (the cache's, also the norms' weights'); angles
// rope_angles of the step's positions
// ([1, d/2, 2] or [B, 1, d/2, 2]); cache_k, cache_v [B, Hk, capacity, d]; past I32 [1] or [B] on the
// device, each sequence's position as kv_cache_write(cache, rows, past) takes it (the caller checks
// past_b < capacity, as there). Returns q normalised and rotated, [B, 1, Hq, d].
Tensor decode_prologue(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm, const Tensor& angles,
                       Tensor& cache_k, Tensor& cache_v, const Tensor& past);

// The prologue, then the step's attention over the cache it wrote: decode_attention(decode_prologue(q, k, v,
// norm, angles, cache_k, cache_v, past), cache_k, cache_v, past, {}, scale), bit for bit, with the same
// arguments and the same writes to the caches. Where prologue_in_attention_choice() is fused and the CUDA
// split kernel that reads few rows per KV head runs (BF16, head dim 64 or 128, at most 4 query heads a KV
// head, 16-byte aligned rows), that kernel does the prologue's work itself: each block normalises and
// rotates its own query heads, and the block whose split holds a sequence's new position writes its KV
// head's new key and value (decode_attention.cu, "Prologue"); one launch a layer fewer. Elsewhere, and
// on the CPU, the two ops in turn.
Tensor decode_prologue_attention(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                                 const Tensor& angles, Tensor& cache_k, Tensor& cache_v, const Tensor& past,
                                 double scale);
// Whether CUDA's split kernel does the prologue's work for these (checked) operands: BF16, head dim 64 or 128,
// at most kDecodeRowsKernelMaxRows query heads a KV head (its few-rows kernel), 16-byte aligned rows and norm
// weights. Elsewhere the two launches run.
bool prologue_fits_attention(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                             const Tensor& cache_k, const Tensor& cache_v);

// Whether attention's decoding steps take decode_prologue (fused) or its six ops (separate):
// FATHOM_DECODE_PROLOGUE=fused|separate, read at the first call; unset, fused (its GPU tests passed and
// it paid in the decoding benchmark, bench/results/2026-12-05_decode_defaults_h100.md).
using DecodePrologue = Fusion;
DecodePrologue decode_prologue_choice();
void set_decode_prologue_choice(DecodePrologue choice);
// Whether decode_prologue_attention runs the prologue inside attention's split kernel where it can (fused)
// or as its own launch (separate): FATHOM_PROLOGUE_IN_ATTENTION=fused|separate, read at the first call;
// unset, fused (its GPU tests passed and it paid in the decoding benchmark, decode_prologue.cpp).
Fusion prologue_in_attention_choice();
void set_prologue_in_attention_choice(Fusion choice);

// The backends' entry point (arguments checked).
using DecodePrologueKernel = Tensor(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                                    const Tensor& angles, Tensor& cache_k, Tensor& cache_v, const Tensor& past);
FATHOM_BACKENDS(DecodePrologueKernel, decode_prologue)
using DecodePrologueAttentionKernel = Tensor(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                                             const Tensor& angles, Tensor& cache_k, Tensor& cache_v, const Tensor& past,
                                             double scale);
FATHOM_BACKENDS(DecodePrologueAttentionKernel, decode_prologue_attention)

}  // namespace fathom
