// Differentiable ops: each runs its forward kernel and, when a gradient is needed, records a Node
// whose backward calls the backward kernel. Coarse and fused, one op per model concept.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/mod/mod_routing.h"
#include "kernels/rope/rope.h"

namespace fathom {

// Parameters with a compute copy (Variable::compute_value, mixed precision) are read through it; their
// F32 gradients then accumulate straight into the parameter's gradient (the arena) where the op can.

// x [..., in] @ weight[out, in]^T -> [..., out]  (bias-free, as in OLMo2).
Variable linear(const Variable& x, const Variable& weight);
// linear(x, w) for each w of `weights`. Where nothing records a gradient (decoding, evaluation) the
// products run as one matmul_each, which a decoding step's few rows on CUDA take as one launch.
std::vector<Variable> linear_each(const Variable& x, std::span<const Variable* const> weights);
// swiglu(x gate^T, x up^T) in one skinny_swiglu launch where nothing records a gradient, x is on a GPU and
// has few enough rows for the skinny GEMM (a decoding step's MLP; swiglu_projection_choice() fused); else
// nothing, and the caller composes the two linears and swiglu. Bit for bit the composition's result.
std::optional<Variable> fused_swiglu_projection(const Variable& x, const Variable& gate, const Variable& up);
// A block's residual step and the linears of what the next sublayer reads, in one
// skinny_matmul_after_residual_step launch (kernels/matmul/skinny_matmul.h) where nothing records a gradient,
// the rows are a decoding step's on a GPU that the launch takes, the skinny GEMM's policy takes each product and
// residual_step_in_gemm_choice() is fused (pre-norm also add_rms_norm_takes_one_pass, whose one pass it repeats):
// {h, the linears' outputs}, bit for bit what residual_rms_norm (or add_rms_norm) and linear_each give.
// Otherwise nothing, and the caller runs those.
struct ResidualProjections {
  Variable h;
  std::vector<Variable> ys;
};
std::optional<ResidualProjections> project_after_residual_step(ResidualStep kind, const Variable& residual,
                                                               const Variable& x, const Variable& norm_weight,
                                                               double eps, std::span<const Variable* const> weights);
// The same for an MLP's gate and up with SwiGLU of the two (swiglu_projection_choice() fused too): one
// skinny_swiglu_after_residual_step launch, {h, {swiglu(in gate^T, in up^T)}}, bit for bit what the step's launch
// and fused_swiglu_projection give; otherwise nothing.
std::optional<ResidualProjections> swiglu_projection_after_residual_step(ResidualStep kind, const Variable& residual,
                                                                         const Variable& x,
                                                                         const Variable& norm_weight, double eps,
                                                                         const Variable& gate, const Variable& up);
// The same with the output in at least F32 (F32 for BF16 x; the GEMM's f32 accumulation unrounded):
// MoD's router and predictor logits, whose ranking and threshold must not see bf16 ties.
Variable linear_wide(const Variable& x, const Variable& weight);
// linear as FP8 GEMMs (train.precision fp8; docs/DESIGN.md, "FP8 linears"): x and the weight in e4m3,
// the output gradient in e5m2, each with its own per-tensor current scale; y (and dx) in x's dtype,
// F32 or BF16. Both widths must be multiples of 16. On the CPU this is the FP8 emulation: the same
// casts, bit for bit, and f32 GEMMs of the dequantized values.
Variable linear_fp8(const Variable& x, const Variable& weight);
// linear_fp8(x, w) for each w of `weights`, with x's amax and casts made once for all of them (forward
// and backward) instead of once per linear.
std::vector<Variable> linear_fp8_each(const Variable& x, std::span<const Variable* const> weights);

// ids (I32 or I64) [...] -> table rows [..., d]. An id outside [0, vocab) is an error naming it.
Variable embedding(const Tensor& ids, const Variable& table);

// y = x / sqrt(mean(x^2 over the last dim) + eps) * weight, weight [last dim], statistics in fp32+.
// Full-width QK-norm passes x [.., Hq*d] with weight [Hq*d]; per-head norm passes x [.., H, d] with [d].
Variable rms_norm(const Variable& x, const Variable& weight, double eps);
// residual + rms_norm(x, weight, eps) in one pass over the activations (the post-norm block's
// residual add); residual has x's shape. With rebuild_from_inputs, selective recompute may rebuild
// the output from residual and x (the node keeps x; pass it only where other nodes keep residual).
Variable residual_rms_norm(const Variable& residual, const Variable& x, const Variable& weight, double eps,
                           bool rebuild_from_inputs = false);
// The pre-norm block's residual step: {h = residual + x, rms_norm(h)}. Where nothing records a gradient
// and add_rms_norm_takes_one_pass (FATHOM_ADD_RMS_NORM=fused at one row or many), one pass (kernels/rms_norm
// add_rms_norm_forward); otherwise add, then rms_norm, recorded as before.
std::pair<Variable, Variable> add_rms_norm(const Variable& residual, const Variable& x, const Variable& weight,
                                           double eps);

// Rotary embedding, rotate_half (NeoX) form: pairs (i, i + d/2), angle pos * theta^(-2i/d), the
// frequencies optionally rescaled (kernels/rope/rope.h: Llama 3's rule).
// x [B, T, H, d] with d even, rotated by `angles`: rope_angles(positions, d, theta, scaling) of its
// positions ([T] shared by the batch, or [B, T]). The node keeps the table (no copy: tables are never
// written after they are made), so the layers of a forward share one.
Variable rope(const Variable& x, const Tensor& angles);

// silu(gate) * up, elementwise.
Variable swiglu(const Variable& gate, const Variable& up);
// x * sigmoid(x), elementwise.
Variable silu(const Variable& x);

// Causal grouped-query attention: q [B, T, Hq, d], k and v [B, T, Hk, d], Hq = G * Hk (query head h
// reads KV head h / G), softmax(q k^T * scale) v over keys j <= t. Returns [B, T, Hq, d].
Variable attention(const Variable& q, const Variable& k, const Variable& v, double scale);

// Dual-state gated linear attention (DSLA, kernels/dsla/dsla.h): q [B, T, H, d], k and v [B, T, Hk, d],
// per-key-dimension log gates g1, g2 [B, T, H, d] (<= 0), gamma [H] the first state's mixing weight:
// o_t = (q_t / sqrt(d)) (gamma S1_t + (1 - gamma) S2_t), S_i,t = diag(e^{g_i,t}) S_i,t-1 + k_t^T v_t, from
// zero states. An undefined g2 is one state (plain GLA; gamma may then be undefined too).
Variable dsla_attention(const Variable& q, const Variable& k, const Variable& v, const Variable& g1, const Variable& g2,
                        const Variable& gamma);

// Mean over counted rows of cross-entropy + z_loss_weight * logsumexp^2. logits [N, V], targets
// (I32/I64) [N]; rows whose target equals ignore_index do not count. A target outside [0, V) other
// than ignore_index is an error. `ce` and `z` are the two terms' means, for logging.
struct LossParts {
  Variable loss;  // one element
  double ce = 0;
  double z = 0;
  int64_t counted = 0;
};
LossParts cross_entropy(const Variable& logits, const Tensor& targets, double z_loss_weight,
                        int64_t ignore_index = -100);

// The head and the same loss in one op, for the training step: logits = h weight^T (h [N, d], weight
// [V, d], read through its compute copy), chunk_rows rows at a time. Each chunk's logits exist only
// while it is processed: their gradient overwrites them (for the expected upstream gradient
// expected_grad, finite and nonzero) and forms dh and dweight right away; backward hands those
// over, rescaled by upstream / expected_grad should another gradient arrive. The [N, V] logits are
// never whole: memory holds one chunk of them, dh, and dweight in the weight's dtype. Without a
// gradient to form it is cross_entropy(linear(h, weight), ...). targets may be on the host (the
// per-chunk counts are read from them without waiting on the device) or on h's device.
LossParts linear_cross_entropy(const Variable& h, const Variable& weight, const Tensor& targets, double z_loss_weight,
                               double expected_grad, int64_t chunk_rows, int64_t ignore_index = -100);

// Mixture-of-Depths routing (kernels/mod/mod_routing.h). x [B, S, ...] -> x[b, idx[b, j]] [B, k, ...];
// the gradient scatters back (idx distinct per row, as top-k's are).
Variable gather_rows(const Variable& x, const Tensor& idx);
// The routed residual: x except out[b, idx_j] = x + g(r) (y_j - x) at the chosen rows, y [B, k, d] the
// block's output on them, r F32 [B, S] the router logits (unused for RouteWeight::one). x, y and r get
// their gradients; r only through g(r) * delta.
Variable routed_mix(const Variable& x, const Variable& y, const Variable& r, const Tensor& idx, RouteWeight weight);
// Mean BCE with logits against fixed targets in [0, 1] (logits F32/F64, targets of their shape and dtype).
Variable routing_bce(const Variable& logits, const Tensor& targets);
// DSLA's gates (kernels/dsla/gates.h), in fp32 whatever z's dtype: g = scale * logsigmoid(z + bias) for z
// [..., n] and bias [n] (read in its fp32 master precision); and sigmoid(logits) for logits [m]
// repeated to n outputs (n / m consecutive outputs per logit).
Variable log_sigmoid_gate(const Variable& z, const Variable& bias, double scale);
Variable sigmoid_expand(const Variable& logits, int64_t n);

Variable add(const Variable& a, const Variable& b);
// The same values in another element type (e.g. F32 -> BF16 for a bf16 kernel); the gradient is cast back.
Variable cast(const Variable& x, DType dtype);
Variable scale(const Variable& x, double alpha);
Variable reshape(const Variable& x, const Shape& shape);

// Activation recompute: segment(x) whose intermediate tensors are not kept. The forward runs the
// segment without recording; backward runs it again from the saved input and backpropagates through
// that local graph, so parameter gradients equal the ordinary ones bit for bit. The segment must be
// deterministic and must not write state that outlives it (MoDA's depth stream does: no checkpoint there).
// `parameters`: the leaves the segment reads, so that backward can tell when their gradients are
// final (autograd/gradient_ready.h; a segment reading one it does not name fails there).
Variable checkpoint(std::function<Variable(const Variable&)> segment, const Variable& x,
                    const std::vector<Variable>& parameters = {});

}  // namespace fathom
