// checkpoint: activation recompute for one segment (a decoder block). The forward runs the segment
// without recording, so none of its intermediate tensors stay alive; the node keeps only the input.
// Its backward runs the segment again with recording on, over a fresh leaf holding that input, and
// backpropagates the output gradient through this local graph. Parameters reached inside get their
// gradients exactly as in an ordinary backward (same kernels, same order: same bits); the leaf's
// gradient goes on to the input's producer.
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace fathom {

namespace {

class CheckpointNode final : public Node {
 public:
  CheckpointNode(std::function<Variable(const Variable&)> segment, Tensor input, bool input_needs_grad,
                 std::vector<VariableImpl*> parameters)
      : segment_(std::move(segment)),
        input_(std::move(input)),
        input_needs_grad_(input_needs_grad),
        parameters_(std::move(parameters)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    EnableGrad recording;  // the engine runs nodes under NoGrad
    const Variable leaf(input_, input_needs_grad_);
    const Variable output = segment_(leaf);
    FATHOM_CHECK(output.shape() == grad_output.shape(), "checkpoint: the recomputed segment returned ",
                 describe(output.value()), " but its first run returned ", describe(grad_output),
                 " (a segment must be deterministic)");
    if (output.requires_grad()) fathom::backward(output, grad_output);
    return {input_needs_grad_ ? leaf.grad() : Tensor()};
  }
  std::vector<VariableImpl*> nested_leaves() const override { return parameters_; }
  void release_saved() override {
    input_ = Tensor();
    segment_ = nullptr;
  }
  const char* name() const override { return "checkpoint"; }

 private:
  std::function<Variable(const Variable&)> segment_;
  Tensor input_;
  bool input_needs_grad_;
  // The parameters the segment reads that need gradients (kept alive by their modules).
  std::vector<VariableImpl*> parameters_;
};

}  // namespace

Variable checkpoint(std::function<Variable(const Variable&)> segment, const Variable& x,
                    const std::vector<Variable>& parameters) {
  FATHOM_CHECK(x.defined(), "checkpoint: undefined input");
  FATHOM_CHECK(segment != nullptr, "checkpoint: no segment to run");
  // Nothing will be backpropagated: an ordinary run.
  if (!GradMode::enabled()) return segment(x);
  Variable y;
  {
    NoGrad no_recording;
    y = segment(x.detach());
  }
  // Recorded even when x needs no gradient: the parameters inside the segment may.
  std::vector<VariableImpl*> leaves;
  for (const Variable& p : parameters)
    if (p.requires_grad() && p.is_leaf()) leaves.push_back(p.impl().get());
  auto node = std::make_shared<CheckpointNode>(std::move(segment), x.value(), x.requires_grad(), std::move(leaves));
  return record(y.value(), std::move(node), {x});
}

}  // namespace fathom
