// rope: rotary position embedding; its backward is the inverse rotation.
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/rope.h"

namespace fathom {

namespace {

class RopeNode final : public Node {
 public:
  RopeNode(Tensor positions, double theta) : positions_(std::move(positions)), theta_(theta) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {rope_backward(grad_output, positions_, theta_)};
  }
  void release_saved() override { positions_ = Tensor(); }
  const char* name() const override { return "rope"; }

 private:
  Tensor positions_;
  double theta_;
};

}  // namespace

Variable rope(const Variable& x, const Tensor& positions, double theta) {
  FATHOM_CHECK(x.defined(), "rope: undefined input");
  Tensor y = rope_forward(x.value(), positions, theta);
  if (!any_requires_grad({x})) return Variable(std::move(y));
  // Positions are copied (they are small), so the caller may reuse its buffer before backward runs.
  return record(std::move(y), std::make_shared<RopeNode>(positions.clone(), theta), {x});
}

}  // namespace fathom
