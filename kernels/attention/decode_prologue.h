// A decoding step's attention prologue for one new token per sequence, in one launch: q and k through
// their full-width RMSNorms (OLMo2's QK-norm; none for Llama), both rotated by RoPE's angles, and the
// rotated k and v appended to the KV cache at each sequence's position. It is rms_norm_forward,
// rope_forward and kv_cache_write in turn (six launches a layer), and the CPU runs exactly those.
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

// Whether attention's decoding steps take decode_prologue (fused) or its six ops (separate):
// FATHOM_DECODE_PROLOGUE=fused|separate, read at the first call; unset, fused (its GPU tests passed and
// it paid in the decoding benchmark, bench/results/2026-12-05_decode_defaults_h100.md).
using DecodePrologue = Fusion;
DecodePrologue decode_prologue_choice();
void set_decode_prologue_choice(DecodePrologue choice);

// The backends' entry point (arguments checked).
using DecodePrologueKernel = Tensor(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                                    const Tensor& angles, Tensor& cache_k, Tensor& cache_v, const Tensor& past);
FATHOM_BACKENDS(DecodePrologueKernel, decode_prologue)

}  // namespace fathom
