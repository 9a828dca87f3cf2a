// swiglu: silu(gate) * up, the gated activation of the OLMo2 feed-forward block; silu alone.
#include "kernels/swiglu/swiglu.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"

namespace fathom {

namespace {

class SwigluNode final : public Node {
 public:
  SwigluNode(Tensor gate, Tensor up) : gate_(std::move(gate)), up_(std::move(up)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    SwigluGrads g = swiglu_backward(grad_output, gate_, up_);
    return {needs_input_grad(0) ? g.dgate : Tensor(), needs_input_grad(1) ? g.dup : Tensor()};
  }
  void release_saved() override {
    gate_ = Tensor();
    up_ = Tensor();
  }
  const char* name() const override { return "swiglu"; }

 private:
  Tensor gate_, up_;
};

class SiluNode final : public Node {
 public:
  explicit SiluNode(Tensor x) : x_(std::move(x)) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override { return {silu_backward(grad_output, x_)}; }
  void release_saved() override { x_ = Tensor(); }
  const char* name() const override { return "silu"; }

 private:
  Tensor x_;
};

}  // namespace

Variable swiglu(const Variable& gate, const Variable& up) {
  FATHOM_CHECK(gate.defined() && up.defined(), "swiglu: undefined input");
  Tensor y = swiglu_forward(gate.value(), up.value());
  if (!any_requires_grad({gate, up})) return Variable(std::move(y));
  Variable out = record(std::move(y), std::make_shared<SwigluNode>(gate.value(), up.value()), {gate, up});
  // The node keeps gate and up anyway: the down projection need not keep their product too.
  set_rebuild(out, [gate = gate.value(), up = up.value()] { return swiglu_forward(gate, up); });
  return out;
}

Variable silu(const Variable& x) {
  FATHOM_CHECK(x.defined(), "silu: undefined input");
  Tensor y = silu_forward(x.value());
  if (!any_requires_grad({x})) return Variable(std::move(y));
  return record(std::move(y), std::make_shared<SiluNode>(x.value()), {x});
}

}  // namespace fathom
