// reshape: a view of the same storage with another shape; the gradient is reshaped back.
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"

namespace fathom {

namespace {

class ReshapeNode final : public Node {
 public:
  explicit ReshapeNode(Shape input_shape) : input_shape_(input_shape) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override { return {grad_output.view(input_shape_)}; }
  void release_saved() override {}
  const char* name() const override { return "reshape"; }

 private:
  Shape input_shape_;
};

}  // namespace

Variable reshape(const Variable& x, const Shape& shape) {
  FATHOM_CHECK(x.defined(), "reshape: undefined input");
  Tensor y = x.value().view(shape);  // checks the element count
  if (!any_requires_grad({x})) return Variable(std::move(y));
  Variable out = record(std::move(y), std::make_shared<ReshapeNode>(x.shape()), {x});
  chain_rebuild(x, out, [shape](const Tensor& in) { return in.view(shape); });
  return out;
}

}  // namespace fathom
