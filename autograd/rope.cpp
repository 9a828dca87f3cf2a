// rope: rotary position embedding; its backward is the inverse rotation by the same angles.
#include "kernels/rope/rope.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"

namespace fathom {

namespace {

class RopeNode final : public Node {
 public:
  explicit RopeNode(Tensor angles) : angles_(std::move(angles)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override { return {rope_backward(grad_output, angles_)}; }
  void release_saved() override { angles_ = Tensor(); }
  const char* name() const override { return "rope"; }

 private:
  Tensor angles_;
};

}  // namespace

Variable rope(const Variable& x, const Tensor& angles) {
  FATHOM_CHECK(x.defined(), "rope: undefined input");
  Tensor y = rope_forward(x.value(), angles);
  if (!any_requires_grad({x})) return Variable(std::move(y));
  Variable out = record(std::move(y), std::make_shared<RopeNode>(angles), {x});
  chain_rebuild(x, out, [angles](const Tensor& in) { return rope_forward(in, angles); });
  return out;
}

}  // namespace fathom
