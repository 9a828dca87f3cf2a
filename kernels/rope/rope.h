// Rotary position embedding, rotate_half (NeoX) form: for i < d/2 the pair (x_i, x_{i+d/2}) is
// rotated by the angle pos * inv_freq_i, inv_freq_i = theta^(-2i/d) unless a frequency scaling
// (Llama 3's) changes it. Angles are computed in double, then cos/sin.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// How the inverse frequencies theta^(-2i/d) are rescaled for contexts longer than training's.
//   none:   unchanged.
//   llama3: Llama 3.1's rule. With wavelength w_i = 2*pi / inv_freq_i, L = original_max_position:
//           w_i < L / high_freq_factor (high frequencies)  -> kept;
//           w_i > L / low_freq_factor  (low frequencies)   -> divided by factor;
//           in between: (1 - s) * inv_freq_i / factor + s * inv_freq_i, s = (L / w_i - low) / (high - low).
struct RopeScaling {
  std::string type = "none";  // "none" | "llama3"
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;

  bool operator==(const RopeScaling&) const = default;
};

// Throws fathom::Error naming the field: type none or llama3; for llama3 positive factor and
// low_freq_factor, high_freq_factor > low_freq_factor, original_max_position >= 1.
void validate_rope_scaling(const RopeScaling& scaling);

// The d/2 inverse frequencies for head dim d (even) and base theta, after `scaling`.
std::vector<double> rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling = {});

// The rotation angles of `positions` (I32/I64, >= 0; [T] shared by the batch or [B, T]) for head dim d
// (even) and base theta > 0: a table positions.shape + [d/2, 2] holding (cos, sin) of pos * inv_freq_i,
// in the dtype its backend rotates with (F64 on the CPU, rounded to x's dtype at use; F32 on CUDA).
// Every tensor rotated at those positions with that head dim reuses one table: all attention layers
// of a forward rotate q and k by the same angles (layers/rope_angles.h makes the table once for them).
Tensor rope_angles(const Tensor& positions, int64_t head_dim, double theta, const RopeScaling& scaling = {});

// x [B, T, H, d] rotated by `angles` (rope_angles of its positions and head dim, on x's device).
Tensor rope_forward(const Tensor& x, const Tensor& angles);
// The rotation is orthogonal, so the gradient is grad_y rotated by the opposite angles.
Tensor rope_backward(const Tensor& grad_y, const Tensor& angles);
// The same, with the angles made for this call.
Tensor rope_forward(const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling = {});
Tensor rope_backward(const Tensor& grad_y, const Tensor& positions, double theta, const RopeScaling& scaling = {});

// The backends' entry points. rope_apply rotates by +angle (forward) or -angle (inverse = backward). On
// CUDA a negative position is reported at the next synchronisation (kernels/runtime/runtime.h).
using RopeAnglesKernel = Tensor(const Tensor& positions, int64_t head_dim, double theta, const RopeScaling& scaling);
using RopeApplyKernel = Tensor(const Tensor& x, const Tensor& angles, bool inverse);
FATHOM_BACKENDS(RopeAnglesKernel, rope_angles)
FATHOM_BACKENDS(RopeApplyKernel, rope_apply)

}  // namespace fathom
