// rms_norm: normalises the last dim by its root mean square, then scales by a learned weight.
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/rms_norm.h"

namespace fathom {

namespace {

class RmsNormNode final : public Node {
 public:
  RmsNormNode(Tensor x, Tensor weight, Tensor rstd) : x_(std::move(x)), weight_(std::move(weight)), rstd_(std::move(rstd)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    RmsNormGrads g = rms_norm_backward(grad_output, x_, weight_, rstd_);
    return {needs_input_grad(0) ? g.dx : Tensor(), needs_input_grad(1) ? g.dweight : Tensor()};
  }
  void release_saved() override {
    x_ = Tensor();
    weight_ = Tensor();
    rstd_ = Tensor();
  }
  const char* name() const override { return "rms_norm"; }

 private:
  Tensor x_, weight_, rstd_;
};

}  // namespace

Variable rms_norm(const Variable& x, const Variable& weight, double eps) {
  FATHOM_CHECK(x.defined() && weight.defined(), "rms_norm: undefined input");
  RmsNormOutput out = rms_norm_forward(x.value(), weight.value(), eps);
  if (!any_requires_grad({x, weight})) return Variable(std::move(out.y));
  auto node = std::make_shared<RmsNormNode>(x.value(), weight.value(), std::move(out.rstd));
  return record(std::move(out.y), std::move(node), {x, weight});
}

}  // namespace fathom
