#include "kernels/cross_entropy/cross_entropy.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_logits_targets(const char* op, const Tensor& logits, const Tensor& targets, double z_loss_weight) {
  FATHOM_CHECK(logits.defined() && logits.rank() == 2, op, ": logits must be [N, V], got ", describe(logits));
  FATHOM_CHECK(logits.dim(1) > 0, op, ": logits ", describe(logits), " have an empty vocabulary");
  FATHOM_CHECK(targets.defined() && (targets.dtype() == DType::i32 || targets.dtype() == DType::i64), op,
               ": targets must be I32 or I64, got ", describe(targets));
  FATHOM_CHECK(targets.rank() == 1 && targets.dim(0) == logits.dim(0), op, ": targets ", describe(targets),
               " must be [N] = [", logits.dim(0), "] for logits ", describe(logits));
  FATHOM_CHECK(std::isfinite(z_loss_weight) && z_loss_weight >= 0, op, ": z_loss_weight must be finite and >= 0, got ",
               z_loss_weight);
}
// The gradient the loss receives: one element in the logits' statistics dtype.
void check_grad_loss(const char* op, const Tensor& grad_loss, const Tensor& logits) {
  const DType stats = stats_dtype(logits.dtype());
  FATHOM_CHECK(grad_loss.defined() && grad_loss.numel() == 1, op, ": grad_loss must hold one element, got ",
               describe(grad_loss));
  FATHOM_CHECK(grad_loss.dtype() == stats, op, ": grad_loss ", describe(grad_loss), " should be ", dtype_name(stats),
               " for logits ", describe(logits));
}
}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                         int64_t ignore_index) {
  check_logits_targets("cross_entropy", logits, targets, z_loss_weight);
  return on_device("cross_entropy", common_device("cross_entropy", {&logits, &targets}),
                   FATHOM_KERNEL(cross_entropy_forward), logits, targets, z_loss_weight, ignore_index);
}

void cross_entropy_backward_into(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, double z_loss_weight, int64_t ignore_index, Tensor& grad_logits) {
  check_logits_targets("cross_entropy_backward", logits, targets, z_loss_weight);
  FATHOM_CHECK(grad_loss.defined() && grad_loss.numel() == 1,
               "cross_entropy_backward: grad_loss must hold one element, got ", describe(grad_loss));
  const DType stats = stats_dtype(logits.dtype());
  FATHOM_CHECK(lse.defined() && lse.shape() == Shape{logits.dim(0)} && lse.dtype() == stats,
               "cross_entropy_backward: lse ", describe(lse), " should be ", dtype_name(stats), "[", logits.dim(0),
               "]");
  FATHOM_CHECK(grad_logits.defined() && grad_logits.shape() == logits.shape() && grad_logits.dtype() == logits.dtype(),
               "cross_entropy_backward: grad_logits ", describe(grad_logits), " should match logits ",
               describe(logits));
  // Either exactly the logits (in place) or a separate buffer: a partial overlap would read
  // gradients where logits should be.
  FATHOM_CHECK(!grad_logits.shares_storage_with(logits) || grad_logits.raw() == logits.raw(),
               "cross_entropy_backward: grad_logits overlaps the logits without being them");
  FATHOM_CHECK(!grad_logits.shares_storage_with(lse) && !grad_logits.shares_storage_with(targets),
               "cross_entropy_backward: grad_logits must not share storage with lse or targets");
  return on_device("cross_entropy_backward",
                   common_device("cross_entropy_backward", {&grad_loss, &logits, &targets, &lse, &grad_logits}),
                   FATHOM_KERNEL(cross_entropy_backward_into), grad_loss, logits, targets, lse, z_loss_weight,
                   ignore_index, grad_logits);
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double z_loss_weight, int64_t ignore_index) {
  FATHOM_CHECK(logits.defined(), "cross_entropy_backward: logits are undefined");
  Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  cross_entropy_backward_into(grad_loss, logits, targets, lse, z_loss_weight, ignore_index, grad);
  return grad;
}

CrossEntropyOutput cross_entropy_forward_with_grad(Tensor& logits, const Tensor& targets, double z_loss_weight,
                                                   int64_t ignore_index, const Tensor& grad_loss, bool read_parts) {
  const char* op = "cross_entropy_forward_with_grad";
  check_logits_targets(op, logits, targets, z_loss_weight);
  check_grad_loss(op, grad_loss, logits);
  // The logits are overwritten: the targets and grad_loss must not be among them.
  FATHOM_CHECK(!logits.shares_storage_with(targets) && !logits.shares_storage_with(grad_loss), op,
               ": the logits must not share storage with the targets or grad_loss (they are overwritten)");
  return on_device(op, common_device(op, {&logits, &targets, &grad_loss}),
                   FATHOM_KERNEL(cross_entropy_forward_with_grad), logits, targets, z_loss_weight, ignore_index,
                   grad_loss, read_parts);
}

void scale_grad_unless_expected(Tensor& grad, const Tensor& upstream, const Tensor& expected) {
  const char* op = "scale_grad_unless_expected";
  FATHOM_CHECK(grad.defined() && is_floating(grad.dtype()), op, ": grad must be a floating tensor, got ",
               describe(grad));
  FATHOM_CHECK(upstream.defined() && upstream.numel() == 1 && expected.defined() && expected.numel() == 1, op,
               ": upstream and expected must hold one element each, got ", describe(upstream), " and ",
               describe(expected));
  FATHOM_CHECK(upstream.dtype() == expected.dtype() && is_floating(expected.dtype()), op, ": upstream ",
               describe(upstream), " and expected ", describe(expected), " must share one floating dtype");
  FATHOM_CHECK(!grad.shares_storage_with(upstream) && !grad.shares_storage_with(expected), op,
               ": grad must not share storage with upstream or expected");
  return on_device(op, common_device(op, {&grad, &upstream, &expected}), FATHOM_KERNEL(scale_grad_unless_expected),
                   grad, upstream, expected);
}

}  // namespace fathom
