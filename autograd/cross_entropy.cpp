// cross_entropy: mean next-token loss plus z-loss. The ordinary op saves the logits and per-row
// log-sum-exps for backward; the consuming op, given logits nothing else holds, computes their
// gradient in the forward pass, over them.
#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/cross_entropy.h"
#include "kernels/dispatch.h"

namespace fathom {

namespace {

class CrossEntropyNode final : public Node {
 public:
  CrossEntropyNode(Tensor logits, Tensor targets, Tensor lse, double z_loss_weight, int64_t ignore_index)
      : logits_(std::move(logits)), targets_(std::move(targets)), lse_(std::move(lse)),
        z_loss_weight_(z_loss_weight), ignore_index_(ignore_index) {}

  // When nothing else holds the logits (the caller dropped its handle, as the trainer does), their
  // gradient overwrites them: a 100K-vocabulary batch then needs one logits-sized buffer, not two.
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    if (!logits_.sole_owner_of_storage())
      return {cross_entropy_backward(grad_output, logits_, targets_, lse_, z_loss_weight_, ignore_index_)};
    Tensor grad = logits_;
    cross_entropy_backward_into(grad_output, logits_, targets_, lse_, z_loss_weight_, ignore_index_, grad);
    return {grad};
  }
  void release_saved() override { logits_ = targets_ = lse_ = Tensor(); }
  const char* name() const override { return "cross_entropy"; }

 private:
  Tensor logits_, targets_, lse_;
  double z_loss_weight_;
  int64_t ignore_index_;
};

// The gradient was written in the forward for an expected upstream gradient; backward only corrects
// it when another one arrives (scale_grad_unless_expected: nothing to do in the expected case).
class FusedCrossEntropyNode final : public Node {
 public:
  FusedCrossEntropyNode(Tensor grad, Tensor expected) : grad_(std::move(grad)), expected_(std::move(expected)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    scale_grad_unless_expected(grad_, grad_output.to(expected_.dtype()), expected_);
    return {grad_};
  }
  void release_saved() override { grad_ = expected_ = Tensor(); }
  const char* name() const override { return "cross_entropy_fused"; }

 private:
  Tensor grad_, expected_;
};

}  // namespace

LossParts cross_entropy(const Variable& logits, const Tensor& targets, double z_loss_weight, int64_t ignore_index) {
  FATHOM_CHECK(logits.defined(), "cross_entropy: undefined logits");
  CrossEntropyOutput out = cross_entropy_forward(logits.value(), targets, z_loss_weight, ignore_index);
  LossParts parts;
  parts.ce = out.ce;
  parts.z = out.z;
  parts.counted = out.counted;
  if (!any_requires_grad({logits})) {
    parts.loss = Variable(std::move(out.loss));
    return parts;
  }
  // Targets are copied (they are small): a loader may refill its batch buffer before backward runs.
  auto node = std::make_shared<CrossEntropyNode>(logits.value(), targets.clone(), std::move(out.lse), z_loss_weight,
                                                 ignore_index);
  parts.loss = record(std::move(out.loss), std::move(node), {logits});
  return parts;
}

LossParts cross_entropy_consuming(Variable&& logits, const Tensor& targets, double z_loss_weight,
                                  double expected_grad, int64_t ignore_index) {
  FATHOM_CHECK(logits.defined(), "cross_entropy: undefined logits");
  FATHOM_CHECK(std::isfinite(expected_grad) && expected_grad != 0, "cross_entropy: expected_grad must be finite and "
               "nonzero (the fused gradient is rescaled by upstream / expected_grad), got ", expected_grad);
  const Variable owned = std::move(logits);
  // Overwriting is safe only when no handle, view or saved copy can read the logits later: this
  // handle is the only one on the variable, its value the only one on the storage.
  const bool sole_owner = owned.impl().use_count() == 1 && owned.value().sole_owner_of_storage();
  if (!sole_owner || !any_requires_grad({owned})) return cross_entropy(owned, targets, z_loss_weight, ignore_index);
  Tensor grad = owned.value();  // the logits, about to hold their gradient
  const Tensor expected =
      Tensor::full(Shape{}, expected_grad, stats_dtype(grad.dtype())).to(grad.device());
  CrossEntropyOutput out = cross_entropy_forward_with_grad(grad, targets, z_loss_weight, ignore_index, expected);
  LossParts parts;
  parts.ce = out.ce;
  parts.z = out.z;
  parts.counted = out.counted;
  parts.loss = record(std::move(out.loss), std::make_shared<FusedCrossEntropyNode>(std::move(grad), expected), {owned});
  return parts;
}

}  // namespace fathom
