#include "kernels/rope/rope.h"

#include <cmath>
#include <numbers>

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_rope(const char* op, const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling) {
  FATHOM_CHECK(x.defined() && x.rank() == 4, op, ": x must be [B, T, H, d], got ", describe(x));
  FATHOM_CHECK(x.dim(3) % 2 == 0, op, ": head dim must be even to split into rotation pairs, got ", x.dim(3), " in ",
               describe(x));
  FATHOM_CHECK(positions.defined(), op, ": positions are undefined");
  FATHOM_CHECK(positions.dtype() == DType::i32 || positions.dtype() == DType::i64, op,
               ": positions must be I32 or I64, got ", describe(positions));
  const bool shared = positions.rank() == 1 && positions.dim(0) == x.dim(1);
  const bool per_row = positions.rank() == 2 && positions.dim(0) == x.dim(0) && positions.dim(1) == x.dim(1);
  FATHOM_CHECK(shared || per_row, op, ": positions ", describe(positions), " must be [T] = [", x.dim(1),
               "] or [B, T] = [", x.dim(0), ", ", x.dim(1), "] for x ", describe(x));
  FATHOM_CHECK(theta > 0 && std::isfinite(theta), op, ": theta must be positive and finite, got ", theta);
  validate_rope_scaling(scaling);
}
}  // namespace

void validate_rope_scaling(const RopeScaling& s) {
  FATHOM_CHECK(s.type == "none" || s.type == "llama3", "rope_scaling.type must be one of none, llama3; got '", s.type,
               "'");
  if (s.type == "none") return;
  FATHOM_CHECK(s.factor > 0 && std::isfinite(s.factor), "rope_scaling.factor must be positive, got ", s.factor);
  FATHOM_CHECK(s.low_freq_factor > 0 && std::isfinite(s.low_freq_factor),
               "rope_scaling.low_freq_factor must be positive, got ", s.low_freq_factor);
  FATHOM_CHECK(s.high_freq_factor > s.low_freq_factor && std::isfinite(s.high_freq_factor),
               "rope_scaling.high_freq_factor (", s.high_freq_factor, ") must be greater than low_freq_factor (",
               s.low_freq_factor, ")");
  FATHOM_CHECK(s.original_max_position >= 1, "rope_scaling.original_max_position must be at least 1, got ",
               s.original_max_position);
}

std::vector<double> rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(head_dim));
  if (scaling.type == "none") return inv_freq;

  const double context = double(scaling.original_max_position);
  const double low_freq_wavelength = context / scaling.low_freq_factor;    // longer: fully scaled
  const double high_freq_wavelength = context / scaling.high_freq_factor;  // shorter: kept
  for (double& f : inv_freq) {
    const double wavelength = 2 * std::numbers::pi / f;
    if (wavelength < high_freq_wavelength) continue;
    if (wavelength > low_freq_wavelength) {
      f /= scaling.factor;
      continue;
    }
    const double smooth =
        (context / wavelength - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
    f = (1 - smooth) * f / scaling.factor + smooth * f;
  }
  return inv_freq;
}

Tensor rope_forward(const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling) {
  check_rope("rope", x, positions, theta, scaling);
  return on_device("rope", common_device("rope", {&x, &positions}), FATHOM_KERNEL(rope_rotate), x, positions, theta,
                   scaling, false);
}

Tensor rope_backward(const Tensor& grad_y, const Tensor& positions, double theta, const RopeScaling& scaling) {
  check_rope("rope_backward", grad_y, positions, theta, scaling);
  return on_device("rope_backward", common_device("rope_backward", {&grad_y, &positions}), FATHOM_KERNEL(rope_rotate),
                   grad_y, positions, theta, scaling, true);
}

}  // namespace fathom
