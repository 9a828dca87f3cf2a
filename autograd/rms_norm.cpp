// rms_norm: normalises the last dim by its root mean square, then scales by a learned weight.
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/rms_norm.h"

namespace fathom {

namespace {

class RmsNormNode final : public Node {
 public:
  RmsNormNode(Tensor x, Tensor weight, Tensor rstd, DType weight_grad_dtype)
      : x_(std::move(x)), weight_(std::move(weight)), rstd_(std::move(rstd)), weight_grad_dtype_(weight_grad_dtype) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    RmsNormGrads g = rms_norm_backward(grad_output, x_, weight_, rstd_, weight_grad_dtype_);
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
  DType weight_grad_dtype_;  // the parameter's own (F32 master) dtype, also when computing with a BF16 copy
};

}  // namespace

Variable rms_norm(const Variable& x, const Variable& weight, double eps) {
  FATHOM_CHECK(x.defined() && weight.defined(), "rms_norm: undefined input");
  const Tensor& w = weight.compute_value();
  RmsNormOutput out = rms_norm_forward(x.value(), w, eps);
  if (!any_requires_grad({x, weight})) return Variable(std::move(out.y));
  auto node = std::make_shared<RmsNormNode>(x.value(), w, std::move(out.rstd), weight.dtype());
  return record(std::move(out.y), std::move(node), {x, weight});
}

}  // namespace fathom
