// cross_entropy: mean next-token loss plus z-loss; saves the logits and per-row log-sum-exps for
// backward. (The training step's head and loss, which form their gradients in the forward pass, are
// linear_cross_entropy.)
#include "kernels/cross_entropy/cross_entropy.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/dispatch.h"

namespace fathom {

namespace {

class CrossEntropyNode final : public Node {
 public:
  CrossEntropyNode(Tensor logits, Tensor targets, Tensor lse, double z_loss_weight, int64_t ignore_index)
      : logits_(std::move(logits)),
        targets_(std::move(targets)),
        lse_(std::move(lse)),
        z_loss_weight_(z_loss_weight),
        ignore_index_(ignore_index) {}

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

}  // namespace fathom
