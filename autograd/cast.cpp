// cast: changes the element type; the gradient is cast back to the input's type.
#include "autograd/node.h"
#include "autograd/ops.h"

namespace fathom {

namespace {

class CastNode final : public Node {
 public:
  explicit CastNode(DType input_dtype) : input_dtype_(input_dtype) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override { return {grad_output.to(input_dtype_)}; }
  void release_saved() override {}
  const char* name() const override { return "cast"; }

 private:
  DType input_dtype_;
};

}  // namespace

Variable cast(const Variable& x, DType dtype) {
  FATHOM_CHECK(x.defined(), "cast: undefined input");
  if (x.dtype() == dtype) return x;
  Tensor out = x.value().to(dtype);
  if (!any_requires_grad({x})) return Variable(std::move(out));
  return record(std::move(out), std::make_shared<CastNode>(x.dtype()), {x});
}

}  // namespace fathom
