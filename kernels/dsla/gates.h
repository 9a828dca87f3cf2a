// DSLA's gates, in fp32 whatever the activations' dtype (DESIGN.md 4.4): the log forget gate of each
// key dimension, g = scale * logsigmoid(z + b), and the states' mixing weight gamma = sigmoid(c).
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// z [..., n] (F32 or F64; BF16 too on CUDA) and bias [n] in z's statistics dtype (F32, F64 for F64
// z) -> g [..., n] in that dtype, g = scale * logsigmoid(z + bias), bias repeated over the rows.
Tensor log_sigmoid_gate_forward(const Tensor& z, const Tensor& bias, double scale);
// The gradient of g with respect to u = z + bias, from the gate alone:
// dg/du = scale * sigmoid(-u) = -scale * expm1(g / scale). grad_g and g [..., n] of one dtype;
// returns grad_g * dg/du in it.
Tensor log_sigmoid_gate_backward(const Tensor& grad_g, const Tensor& g, double scale);

// logits [m] (F32 or F64) -> sigmoid(logits) [n], n a multiple of m: logit i serves the n / m
// consecutive outputs from i * n / m (one logit per layer serves every head when m = 1).
Tensor sigmoid_expand_forward(const Tensor& logits, int64_t n);
// d logits [m]: over each logit's outputs, the sum of grad_y * y * (1 - y). grad_y and y [n].
Tensor sigmoid_expand_backward(const Tensor& grad_y, const Tensor& y, int64_t m);

// The backends' entry points, one per op above.
using LogSigmoidGateForwardKernel = Tensor(const Tensor& z, const Tensor& bias, double scale);
using LogSigmoidGateBackwardKernel = Tensor(const Tensor& grad_g, const Tensor& g, double scale);
using SigmoidExpandForwardKernel = Tensor(const Tensor& logits, int64_t n);
using SigmoidExpandBackwardKernel = Tensor(const Tensor& grad_y, const Tensor& y, int64_t m);
FATHOM_BACKENDS(LogSigmoidGateForwardKernel, log_sigmoid_gate_forward)
FATHOM_BACKENDS(LogSigmoidGateBackwardKernel, log_sigmoid_gate_backward)
FATHOM_BACKENDS(SigmoidExpandForwardKernel, sigmoid_expand_forward)
FATHOM_BACKENDS(SigmoidExpandBackwardKernel, sigmoid_expand_backward)

}  // namespace fathom
