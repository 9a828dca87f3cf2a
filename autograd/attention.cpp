// attention: causal GQA; saves q, k, v, the output and the row log-sum-exps for the backward kernel.
#include "kernels/attention/attention.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"

namespace fathom {

namespace {

class AttentionNode final : public Node {
 public:
  AttentionNode(SavedTensor q, SavedTensor k, Tensor v, Tensor o, Tensor lse, double scale)
      : q_(std::move(q)), k_(std::move(k)), v_(std::move(v)), o_(std::move(o)), lse_(std::move(lse)), scale_(scale) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    AttentionGrads g = attention_backward(grad_output, q_.get(), k_.get(), v_, o_, lse_, scale_);
    return {needs_input_grad(0) ? g.dq : Tensor(), needs_input_grad(1) ? g.dk : Tensor(),
            needs_input_grad(2) ? g.dv : Tensor()};
  }
  void release_saved() override {
    q_.release();
    k_.release();
    v_ = o_ = lse_ = Tensor();
  }
  const char* name() const override { return "attention"; }

 private:
  SavedTensor q_, k_;  // RoPE's outputs: rebuilt under selective recompute
  Tensor v_, o_, lse_;
  double scale_;
};

}  // namespace

Variable attention(const Variable& q, const Variable& k, const Variable& v, double scale) {
  FATHOM_CHECK(q.defined() && k.defined() && v.defined(), "attention: undefined input");
  AttentionOutput out = attention_forward(q.value(), k.value(), v.value(), scale);
  if (!any_requires_grad({q, k, v})) return Variable(std::move(out.o));
  auto node = std::make_shared<AttentionNode>(SavedTensor::of(q), SavedTensor::of(k), v.value(), out.o,
                                              std::move(out.lse), scale);
  return record(std::move(out.o), std::move(node), {q, k, v});
}

}  // namespace fathom
