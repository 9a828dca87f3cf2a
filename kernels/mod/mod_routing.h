// Mixture-of-Depths routing (DESIGN.md 4.3): the per-sequence top-k of the router's scores, gathering
// the chosen tokens' rows, the routed residual that adds their weighted block delta back, and the
// routing BCE that teaches a causal router the top-k membership.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// g in out[idx] = x[idx] + g(r[idx]) * (y - x[idx]): the logit itself, its sigmoid, or 1 (random
// routing, which has no router; r is then unused and gets no gradient).
enum class RouteWeight { identity, sigmoid, one };

// scores F32 [B, S] -> I32 [B, k], 1 <= k <= S: per row the k highest scores, ties broken by the lower
// index, the k indices in ascending order. Scores are ordered as numbers with -0 == +0; a NaN ranks
// above every number (NaNs among themselves by index), so exactly k are always chosen.
Tensor topk_per_sequence(const Tensor& scores, int64_t k);

// x [B, S, ...] and idx (I32) [B, k] with entries in [0, S) -> [B, k, ...]: rows[b, j] = x[b, idx[b, j]].
Tensor gather_rows(const Tensor& x, const Tensor& idx);
// The reverse, the gather's backward: rows [B, k, ...] -> [B, seq_len, ...], zero except
// out[b, idx[b, j]] = rows[b, j]. The indices of a row must be distinct (top-k's are).
Tensor scatter_rows(const Tensor& rows, const Tensor& idx, int64_t seq_len);

// The routed residual. x [B, S, d], y [B, k, d] (the block's output on the gathered rows, x's dtype),
// r F32 [B, S] (router logits; any defined tensor for RouteWeight::one), idx I32 [B, k] distinct per
// row. out = x, except out[b, i] = (1 - w) x[b, i] + w y[b, j] for i = idx[b, j], w = g(r[b, i]):
// x + w (y - x), in the form that gives exactly x at w = 0 and exactly y at w = 1. Arithmetic in f32
// (f64 for f64 inputs on the CPU).
Tensor routed_mix_forward(const Tensor& x, const Tensor& y, const Tensor& r, const Tensor& idx, RouteWeight weight);
struct RoutedMixGrads {
  Tensor dx;  // like x: grad_out, the chosen rows scaled by (1 - w)
  Tensor dy;  // like y: w grad_out[b, idx]
  Tensor dr;  // like r: g'(r) <grad_out, y - x> at the chosen positions, 0 elsewhere (undefined for one)
};
RoutedMixGrads routed_mix_backward(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& r,
                                   const Tensor& idx, RouteWeight weight);

// Mean binary cross-entropy with logits over all elements: logits F32 [N...], targets F32 of the same
// shape in [0, 1] -> an F32 scalar (f64 for f64 logits). Computed stably: max(l, 0) - l t + log1p(exp(-|l|)).
Tensor routing_bce_forward(const Tensor& logits, const Tensor& targets);
// grad_loss (one element, on the logits' device) -> dlogits = grad_loss (sigmoid(l) - t) / N, formed as
// ((1 - t) sigmoid(l) - t sigmoid(-l)) / N so a confident right prediction keeps its small gradient.
Tensor routing_bce_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets);

// The backends' entry points, one per op above. CUDA's top-k takes up to S = 49152 per row (the scores of
// a row live in shared memory).
using TopkPerSequenceKernel = Tensor(const Tensor& scores, int64_t k);
using GatherRowsKernel = Tensor(const Tensor& x, const Tensor& idx);
using ScatterRowsKernel = Tensor(const Tensor& rows, const Tensor& idx, int64_t seq_len);
using RoutedMixForwardKernel = Tensor(const Tensor& x, const Tensor& y, const Tensor& r, const Tensor& idx,
                                      RouteWeight weight);
using RoutedMixBackwardKernel = RoutedMixGrads(const Tensor& grad_out, const Tensor& x, const Tensor& y,
                                               const Tensor& r, const Tensor& idx, RouteWeight weight);
using RoutingBceForwardKernel = Tensor(const Tensor& logits, const Tensor& targets);
using RoutingBceBackwardKernel = Tensor(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets);
FATHOM_BACKENDS(TopkPerSequenceKernel, topk_per_sequence)
FATHOM_BACKENDS(GatherRowsKernel, gather_rows)
FATHOM_BACKENDS(ScatterRowsKernel, scatter_rows)
FATHOM_BACKENDS(RoutedMixForwardKernel, routed_mix_forward)
FATHOM_BACKENDS(RoutedMixBackwardKernel, routed_mix_backward)
FATHOM_BACKENDS(RoutingBceForwardKernel, routing_bce_forward)
FATHOM_BACKENDS(RoutingBceBackwardKernel, routing_bce_backward)

}  // namespace fathom
