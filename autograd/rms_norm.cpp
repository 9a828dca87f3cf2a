// rms_norm: normalises the last dim by its root mean square, then scales by a learned weight;
// residual_rms_norm adds a residual in the same pass (its gradient is the output's).
#include "kernels/rms_norm/rms_norm.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"

namespace fathom {

namespace {

class RmsNormNode final : public Node {
 public:
  // Inputs (x, weight), or (residual, x, weight) with `has_residual`.
  RmsNormNode(Tensor x, Tensor weight, Tensor rstd, DType weight_grad_dtype, bool has_residual)
      : x_(std::move(x)),
        weight_(std::move(weight)),
        rstd_(std::move(rstd)),
        weight_grad_dtype_(weight_grad_dtype),
        has_residual_(has_residual) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const int first = has_residual_ ? 1 : 0;
    RmsNormGrads g = rms_norm_backward(grad_output, x_, weight_, rstd_, weight_grad_dtype_);
    std::vector<Tensor> grads{needs_input_grad(first) ? g.dx : Tensor(),
                              needs_input_grad(first + 1) ? g.dweight : Tensor()};
    if (has_residual_) grads.insert(grads.begin(), grad_output);
    return grads;
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
  bool has_residual_;
};

}  // namespace

Variable rms_norm(const Variable& x, const Variable& weight, double eps) {
  FATHOM_CHECK(x.defined() && weight.defined(), "rms_norm: undefined input");
  const Tensor& w = weight.compute_value();
  RmsNormOutput out = rms_norm_forward(x.value(), w, eps);
  if (!any_requires_grad({x, weight})) return Variable(std::move(out.y));
  auto node = std::make_shared<RmsNormNode>(x.value(), w, std::move(out.rstd), weight.dtype(), false);
  Variable y = record(std::move(out.y), std::move(node), {x, weight});
  // The node keeps x: consumers (pre-norm projections, QK-norm's RoPE) need not keep y too.
  set_rebuild(y, [x = x.value(), w, eps] { return rms_norm_forward(x, w, eps).y; });
  return y;
}

Variable residual_rms_norm(const Variable& residual, const Variable& x, const Variable& weight, double eps,
                           bool rebuild_from_inputs) {
  FATHOM_CHECK(residual.defined() && x.defined() && weight.defined(), "residual_rms_norm: undefined input");
  const Tensor& w = weight.compute_value();
  RmsNormOutput out = rms_norm_forward(x.value(), w, eps, residual.value());
  if (!any_requires_grad({residual, x, weight})) return Variable(std::move(out.y));
  auto node = std::make_shared<RmsNormNode>(x.value(), w, std::move(out.rstd), weight.dtype(), true);
  Variable y = record(std::move(out.y), std::move(node), {residual, x, weight});
  if (rebuild_from_inputs)
    set_rebuild(y, [r = residual.value(), x = x.value(), w, eps] { return rms_norm_forward(x, w, eps, r).y; });
  return y;
}

std::pair<Variable, Variable> add_rms_norm(const Variable& residual, const Variable& x, const Variable& weight,
                                           double eps) {
  FATHOM_CHECK(residual.defined() && x.defined() && weight.defined(), "add_rms_norm: undefined input");
  if (any_requires_grad({residual, x, weight}) || !add_rms_norm_takes_one_pass(x.shape().rows())) {
    Variable h = add(residual, x);
    Variable y = rms_norm(h, weight, eps);
    return {std::move(h), std::move(y)};
  }
  AddRmsNormOutput out = add_rms_norm_forward(residual.value(), x.value(), weight.compute_value(), eps);
  return {Variable(std::move(out.sum)), Variable(std::move(out.normed.y))};
}

}  // namespace fathom
