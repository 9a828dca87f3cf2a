// rope: rotary position embedding; its backward is the inverse rotation.
#include "kernels/rope/rope.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"

namespace fathom {

namespace {

class RopeNode final : public Node {
 public:
  RopeNode(Tensor positions, double theta, RopeScaling scaling)
      : positions_(std::move(positions)), theta_(theta), scaling_(std::move(scaling)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {rope_backward(grad_output, positions_, theta_, scaling_)};
  }
  void release_saved() override { positions_ = Tensor(); }
  const char* name() const override { return "rope"; }

 private:
  Tensor positions_;
  double theta_;
  RopeScaling scaling_;
};

}  // namespace

Variable rope(const Variable& x, const Tensor& positions, double theta, const RopeScaling& scaling) {
  FATHOM_CHECK(x.defined(), "rope: undefined input");
  Tensor y = rope_forward(x.value(), positions, theta, scaling);
  if (!any_requires_grad({x})) return Variable(std::move(y));
  // Positions are copied (they are small), so the caller may reuse its buffer before backward runs.
  Tensor kept_positions = positions.clone();
  Variable out = record(std::move(y), std::make_shared<RopeNode>(kept_positions, theta, scaling), {x});
  chain_rebuild(x, out, [kept_positions, theta, scaling](const Tensor& in) {
    return rope_forward(in, kept_positions, theta, scaling);
  });
  return out;
}

}  // namespace fathom
