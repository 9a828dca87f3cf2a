#include "kernels/divergences/divergences.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace fathom {

namespace {

// Two tensors a loss compares: defined, non-empty, of one shape, floating dtype and device.
void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  FATHOM_CHECK(a.defined() && b.defined(), op, ": undefined input");
  FATHOM_CHECK(a.rank() >= 1 && a.numel() > 0, op, ": empty input ", describe(a));
  FATHOM_CHECK(a.shape() == b.shape(), op, ": inputs ", describe(a), " and ", describe(b), " must have one shape");
  FATHOM_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), op, ": inputs ", describe(a), " and ", describe(b),
               " must share one floating dtype");
}

void check_temperature(const char* op, double temperature) {
  FATHOM_CHECK(std::isfinite(temperature) && temperature > 0, op, ": temperature must be > 0, got ", temperature);
}

void check_grad_loss(const char* op, const Tensor& grad_loss) {
  FATHOM_CHECK(grad_loss.defined() && grad_loss.numel() == 1 && is_floating(grad_loss.dtype()), op,
               ": grad_loss must be one floating element, got ", describe(grad_loss));
}

// A per-row statistic the forward returned: [rows] (or [rows, width]) in the statistics dtype.
void check_row_stats(const char* op, const char* what, const Tensor& stats, const Tensor& input, int64_t width) {
  const DType dtype = stats_dtype(input.dtype());
  const int64_t rows = input.shape().rows();
  const Shape want = width == 1 ? Shape{rows} : Shape{rows, width};
  FATHOM_CHECK(stats.defined() && stats.shape() == want && stats.dtype() == dtype, op, ": ", what, " ", describe(stats),
               " should be ", dtype_name(dtype), want.str(), " for input ", describe(input));
}

}  // namespace

SoftmaxKlOutput softmax_kl_forward(const Tensor& student, const Tensor& teacher, double temperature) {
  const char* op = "softmax_kl";
  check_pair(op, student, teacher);
  check_temperature(op, temperature);
  return on_device(op, common_device(op, {&student, &teacher}), FATHOM_KERNEL(softmax_kl_forward), student, teacher,
                   temperature);
}

Tensor softmax_kl_backward(const Tensor& grad_loss, const Tensor& student, const Tensor& teacher,
                           const Tensor& lse_student, const Tensor& lse_teacher, double temperature) {
  const char* op = "softmax_kl_backward";
  check_pair(op, student, teacher);
  check_temperature(op, temperature);
  check_grad_loss(op, grad_loss);
  check_row_stats(op, "lse_student", lse_student, student, 1);
  check_row_stats(op, "lse_teacher", lse_teacher, student, 1);
  return on_device(op, common_device(op, {&grad_loss, &student, &teacher, &lse_student, &lse_teacher}),
                   FATHOM_KERNEL(softmax_kl_backward), grad_loss, student, teacher, lse_student, lse_teacher,
                   temperature);
}

Tensor mse_forward(const Tensor& x, const Tensor& target) {
  const char* op = "mse";
  check_pair(op, x, target);
  return on_device(op, common_device(op, {&x, &target}), FATHOM_KERNEL(mse_forward), x, target);
}

Tensor mse_backward(const Tensor& grad_loss, const Tensor& x, const Tensor& target) {
  const char* op = "mse_backward";
  check_pair(op, x, target);
  check_grad_loss(op, grad_loss);
  return on_device(op, common_device(op, {&grad_loss, &x, &target}), FATHOM_KERNEL(mse_backward), grad_loss, x, target);
}

RowCosineOutput row_cosine_forward(const Tensor& a, const Tensor& b) {
  const char* op = "row_cosine";
  check_pair(op, a, b);
  return on_device(op, common_device(op, {&a, &b}), FATHOM_KERNEL(row_cosine_forward), a, b);
}

std::pair<Tensor, Tensor> row_cosine_backward(const Tensor& grad_loss, const Tensor& a, const Tensor& b,
                                              const Tensor& sums) {
  const char* op = "row_cosine_backward";
  check_pair(op, a, b);
  check_grad_loss(op, grad_loss);
  check_row_stats(op, "sums", sums, a, 3);
  return on_device(op, common_device(op, {&grad_loss, &a, &b, &sums}), FATHOM_KERNEL(row_cosine_backward), grad_loss, a,
                   b, sums);
}

}  // namespace fathom
