#include "kernels/cross_entropy.h"

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
  FATHOM_CHECK(std::isfinite(z_loss_weight) && z_loss_weight >= 0, op,
               ": z_loss_weight must be finite and >= 0, got ", z_loss_weight);
}
}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                         int64_t ignore_index) {
  check_logits_targets("cross_entropy", logits, targets, z_loss_weight);
  if (common_device("cross_entropy", {&logits, &targets}).is_cpu())
    return cpu::cross_entropy_forward(logits, targets, z_loss_weight, ignore_index);
  no_cuda_kernel("cross_entropy");
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, double z_loss_weight, int64_t ignore_index) {
  check_logits_targets("cross_entropy_backward", logits, targets, z_loss_weight);
  FATHOM_CHECK(grad_loss.defined() && grad_loss.numel() == 1, "cross_entropy_backward: grad_loss must hold one element, got ",
               describe(grad_loss));
  FATHOM_CHECK(lse.defined() && lse.shape() == Shape{logits.dim(0)} && lse.dtype() == logits.dtype(),
               "cross_entropy_backward: lse ", describe(lse), " should be ", dtype_name(logits.dtype()), "[",
               logits.dim(0), "]");
  if (common_device("cross_entropy_backward", {&grad_loss, &logits, &targets, &lse}).is_cpu())
    return cpu::cross_entropy_backward(grad_loss, logits, targets, lse, z_loss_weight, ignore_index);
  no_cuda_kernel("cross_entropy_backward");
}

}  // namespace fathom
