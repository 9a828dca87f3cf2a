#include "kernels/rope/rope.h"

#include <cmath>
#include <numbers>

#include "kernels/dispatch.h"

namespace fathom {

namespace {

void check_positions(const char* op, const Tensor& positions) {
  FATHOM_CHECK(positions.defined(), op, ": positions are undefined");
  FATHOM_CHECK(positions.dtype() == DType::i32 || positions.dtype() == DType::i64, op,
               ": positions must be I32 or I64, got ", describe(positions));
  FATHOM_CHECK(positions.rank() == 1 || positions.rank() == 2, op, ": positions must be [T] or [B, T], got ",
               describe(positions));
}

void check_x(const char* op, const Tensor& x) {
  FATHOM_CHECK(x.defined() && x.rank() == 4, op, ": x must be [B, T, H, d], got ", describe(x));
  FATHOM_CHECK(x.dim(3) % 2 == 0, op, ": head dim must be even to split into rotation pairs, got ", x.dim(3), " in ",
               describe(x));
}

// The positions [T] or [B, T] of x [B, T, H, d].
void check_positions_fit(const char* op, const Tensor& x, const Tensor& positions) {
  const bool shared = positions.rank() == 1 && positions.dim(0) == x.dim(1);
  const bool per_row = positions.rank() == 2 && positions.dim(0) == x.dim(0) && positions.dim(1) == x.dim(1);
  FATHOM_CHECK(shared || per_row, op, ": positions ", describe(positions), " must be [T] = [", x.dim(1),
               "] or [B, T] = [", x.dim(0), ", ", x.dim(1), "] for x ", describe(x));
}

// The dtype of the tables a device's backend makes and rotates with.
DType angles_dtype(Device device) { return device.is_cpu() ? DType::f64 : DType::f32; }

void check_angles(const char* op, const Tensor& x, const Tensor& angles) {
  check_x(op, x);
  FATHOM_CHECK(angles.defined() && (angles.rank() == 3 || angles.rank() == 4), op,
               ": angles must be rope_angles' [T, d/2, 2] or [B, T, d/2, 2], got ", describe(angles));
  const int64_t r = angles.rank();
  FATHOM_CHECK(angles.dim(int(r) - 1) == 2 && angles.dim(int(r) - 2) == x.dim(3) / 2, op, ": angles ", describe(angles),
               " are not for head dim ", x.dim(3), " of x ", describe(x));
  const bool shared = r == 3 && angles.dim(0) == x.dim(1);
  const bool per_row = r == 4 && angles.dim(0) == x.dim(0) && angles.dim(1) == x.dim(1);
  FATHOM_CHECK(shared || per_row, op, ": angles ", describe(angles), " are not for the positions of x ", describe(x),
               " ([T] = [", x.dim(1), "] or [B, T] = [", x.dim(0), ", ", x.dim(1), "])");
  const Device device = common_device(op, {&x, &angles});
  FATHOM_CHECK(angles.dtype() == angles_dtype(device), op, ": angles ", describe(angles), " must be ",
               dtype_name(angles_dtype(device)), " on ", device.str(), " (made by rope_angles there)");
}

Tensor rotate(const char* op, const Tensor& x, const Tensor& angles, bool inverse) {
  check_angles(op, x, angles);
  return on_device(op, x.device(), FATHOM_KERNEL(rope_apply), x, angles, inverse);
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

Tensor rope_angles(const Tensor& positions, int64_t head_dim, double theta, const RopeScaling& scaling) {
  check_positions("rope", positions);
  FATHOM_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head dim must be even to split into rotation pairs, got ",
               head_dim);
  FATHOM_CHECK(theta > 0 && std::isfinite(theta), "rope: theta must be positive and finite, got ", theta);
  validate_rope_scaling(scaling);
  return on_device("rope", positions.device(), FATHOM_KERNEL(rope_angles), positions, head_dim, theta, scaling);
}

Tensor rope_forward(const Tensor& x, const Tensor& angles) { return rotate("rope", x, angles, false); }

Tensor rope_backward(const Tensor& grad_y, const Tensor& angles) {
  return rotate("rope_backward", grad_y, angles, true);
}

Tensor rope_forward(const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling) {
  check_x("rope", x);
  check_positions("rope", positions);
  check_positions_fit("rope", x, positions);
  return rope_forward(x, rope_angles(positions, x.dim(3), theta, scaling));
}

Tensor rope_backward(const Tensor& grad_y, const Tensor& positions, double theta, const RopeScaling& scaling) {
  check_x("rope_backward", grad_y);
  check_positions("rope_backward", positions);
  check_positions_fit("rope_backward", grad_y, positions);
  return rope_backward(grad_y, rope_angles(positions, grad_y.dim(3), theta, scaling));
}

}  // namespace fathom
