// add and scale: the residual sum and constant scaling, elementwise on tensors of one shape.
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/elementwise/elementwise.h"

namespace fathom {

namespace {

class AddNode final : public Node {
 public:
  // Both inputs receive the output gradient as is; the engine never modifies it in place.
  std::vector<Tensor> backward(const Tensor& grad_output) override { return {grad_output, grad_output}; }
  void release_saved() override {}
  const char* name() const override { return "add"; }
};

class ScaleNode final : public Node {
 public:
  explicit ScaleNode(double alpha) : alpha_(alpha) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    Tensor g = grad_output.clone();
    scale_inplace(g, alpha_);
    return {g};
  }
  void release_saved() override {}
  const char* name() const override { return "scale"; }

 private:
  double alpha_;
};

}  // namespace

Variable add(const Variable& a, const Variable& b) {
  FATHOM_CHECK(a.defined() && b.defined(), "add: undefined input");
  Tensor y = add(a.value(), b.value());  // checks shape and dtype
  if (!any_requires_grad({a, b})) return Variable(std::move(y));
  return record(std::move(y), std::make_shared<AddNode>(), {a, b});
}

Variable scale(const Variable& x, double alpha) {
  FATHOM_CHECK(x.defined(), "scale: undefined input");
  Tensor y = x.value().clone();
  scale_inplace(y, alpha);
  if (!any_requires_grad({x})) return Variable(std::move(y));
  return record(std::move(y), std::make_shared<ScaleNode>(alpha), {x});
}

}  // namespace fathom
