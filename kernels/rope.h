// Rotary position embedding, rotate_half (NeoX) form: for i < d/2 the pair (x_i, x_{i+d/2}) is
// rotated by the angle pos * theta^(-2i/d). Angles are computed in double, then cos/sin.
#pragma once
#include "core/tensor.h"

namespace fathom {

// x [B, T, H, d], d even; positions (I32/I64, >= 0) [T] shared by the batch or [B, T]; theta > 0.
Tensor rope_forward(const Tensor& x, const Tensor& positions, double theta);
// The rotation is orthogonal, so the gradient is grad_y rotated by the opposite angles.
Tensor rope_backward(const Tensor& grad_y, const Tensor& positions, double theta);

namespace cpu {
// Rotates by +angle (forward) or -angle (inverse = backward).
Tensor rope_rotate(const Tensor& x, const Tensor& positions, double theta, bool inverse);
}  // namespace cpu

namespace cuda {
// As cpu::rope_rotate; a negative position is reported at the next synchronisation (runtime.h).
Tensor rope_rotate(const Tensor& x, const Tensor& positions, double theta, bool inverse);
}  // namespace cuda

}  // namespace fathom
