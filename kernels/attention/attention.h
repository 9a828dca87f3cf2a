// Causal grouped-query attention with materialised scores (the CPU reference; the MoDA kernels
// extend it). q [B, T, Hq, d], k and v [B, T, Hk, d], Hq = G * Hk: query head h reads KV head h / G.
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

struct AttentionOutput {
  Tensor o;    // [B, T, Hq, d]
  Tensor lse;  // [B, Hq, T]: log-sum-exp over keys j <= t of the scaled scores q.k * scale, in
               // stats_dtype(q) (F32 for F32/BF16 inputs, F64 for F64)
};
struct AttentionGrads {
  Tensor dq;  // [B, T, Hq, d]
  Tensor dk;  // [B, T, Hk, d], summed over the G query heads of each KV head
  Tensor dv;  // [B, T, Hk, d], likewise
};

// o_t = sum_{j <= t} softmax_j(q_t . k_j * scale) v_j.
AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale);
// Recomputes the probabilities from q, k and lse; o is used for the softmax-backward row term.
AttentionGrads attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& o, const Tensor& lse, double scale);

// The mean over batch, query heads and positions of the causal softmax's entropy
// H_t = -sum_j p_tj log p_tj = lse_t - scale * q_t . (sum_j p_tj k_j): one attention pass with the
// keys as values gives the weighted keys, so no score matrix is formed. For taps and layer rankings
// (no gradient); the reduction runs on the host in double.
double attention_entropy(const Tensor& q, const Tensor& k, double scale);

// The backends' entry points. CUDA runs the flash kernels in bf16 (kernels/attention/flash_attention.h) and
// the fp32 kernels for F32 (kernels/attention/attention_fp32.h, train.precision: fp32).
using AttentionForwardKernel = AttentionOutput(const Tensor& q, const Tensor& k, const Tensor& v, double scale);
using AttentionBackwardKernel = AttentionGrads(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                               const Tensor& o, const Tensor& lse, double scale);
FATHOM_BACKENDS(AttentionForwardKernel, attention_forward)
FATHOM_BACKENDS(AttentionBackwardKernel, attention_backward)

}  // namespace fathom
