// DSLA: dual-state gated linear attention (docs/DESIGN.md 4.4; docs/decisions/20-dsla-kernels.md). Per query head h,
// two gated linear-attention states fed the same q, k, v with different per-key-dimension log gates:
//   S_i,t = diag(exp(g_i,t)) S_i,t-1 + k_t^T v_t,    o_t = (q_t / sqrt(d)) (gamma_h S1_t + (1 - gamma_h) S2_t).
// With one state (g2 undefined) o_t = (q_t / sqrt(d)) S1_t: plain GLA. No feature map, no normaliser, no RoPE.
// GQA: k and v carry Hk heads; query head h reads KV head h / (H / Hk).
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// The chunk length of the CPU chunked form (the GPU kernels' own tiling is in kernels/dsla/*.cu).
inline constexpr int64_t kDslaChunk = 64;

struct DslaState {
  Tensor s1, s2;  // [B, H, d, d] (key dim x value dim), F32 (F64 on the CPU for F64 inputs); s2 undefined for one state
};
struct DslaForward {
  Tensor o;               // like q
  DslaState final_state;  // only when asked for
  // Only when asked for, and only from the CUDA bf16 kernels (undefined elsewhere): each 64-token chunk's
  // scaled intra-chunk scores, bf16 [B, H, states, chunks, 64, 64], which dsla_backward then reads
  // instead of recomputing them.
  Tensor scores;
};

// The shape of DslaForward::scores for q [B, T, H, d].
Shape dsla_scores_shape(const Tensor& q, bool two_states);
struct DslaGrads {
  Tensor dq, dk, dv, dg1, dg2, dgamma;  // like their inputs; dg2 undefined for one state; dgamma [H]
};

// q [B, T, H, d]; k, v [B, T, Hk, d] with H = G * Hk; g1, g2 [B, T, H, d] log gates (g2 undefined for one
// state); gamma [H] (ignored with one state, may then be undefined). Optional initial states [B, H, d, d]
// (undefined: zeros). CPU: everything F32, or everything F64 (gradcheck). CUDA: q, k, v BF16 or F32 (one
// dtype), gates, gamma and states F32; d 64 or 128.
DslaForward dsla_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                         const Tensor& gamma, const DslaState& initial = {}, bool return_final_state = false,
                         bool keep_scores = false);
// The gradients of sum(grad_o * o) for a forward from zero states (training has no initial state).
// `scores`: that forward's DslaForward::scores, or undefined (the CUDA bf16 path then computes them again).
DslaGrads dsla_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                        const Tensor& g2, const Tensor& gamma, const Tensor& scores = {});
// Decoding: T (usually 1) new tokens through the step recurrence, updating `state` in place (it must be
// defined: s1, and s2 for two states); returns o [B, T, H, d].
Tensor dsla_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                 const Tensor& gamma, DslaState& state);

// The backends' entry points. The CPU runs the chunked form (chunks of kDslaChunk), the reference the CUDA
// training kernels mirror; it keeps no scores (keep_scores and scores are CUDA's). dsla_step is the step
// recurrence, one token at a time (also the decode path).
using DslaForwardKernel = DslaForward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                                      const Tensor& g2, const Tensor& gamma, const DslaState& initial,
                                      bool return_final_state, bool keep_scores);
using DslaBackwardKernel = DslaGrads(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& g1, const Tensor& g2, const Tensor& gamma, const Tensor& scores);
using DslaStepKernel = Tensor(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                              const Tensor& gamma, DslaState& state);
FATHOM_BACKENDS(DslaForwardKernel, dsla_forward)
FATHOM_BACKENDS(DslaBackwardKernel, dsla_backward)
FATHOM_BACKENDS(DslaStepKernel, dsla_step)

}  // namespace fathom
