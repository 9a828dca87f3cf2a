// DSLA's gates as differentiable ops: log forget gates from a projection and a bias, and the mixing
// weight gamma from its logits. Both compute and return fp32 (kernels/dsla/gates.h).
#include "kernels/dsla/gates.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/matmul/matmul.h"

namespace fathom {

namespace {

class LogSigmoidGateNode final : public Node {
 public:
  // The gate itself is all backward needs (the DSLA op that consumes it keeps the same tensor).
  LogSigmoidGateNode(Tensor g, DType z_dtype, double scale) : g_(std::move(g)), z_dtype_(z_dtype), scale_(scale) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const Tensor du = log_sigmoid_gate_backward(grad_output, g_, scale_);
    Tensor dz, dbias;
    if (needs_input_grad(0)) dz = du.to(z_dtype_);
    if (needs_input_grad(1)) {
      // The bias's gradient sums the rows: ones [1, rows] @ du [rows, n], in du's fp32.
      const int64_t n = g_.dim(-1), rows = g_.numel() / n;
      const Tensor ones = Tensor::full({1, rows}, 1.0, du.dtype(), du.device());
      dbias = matmul(ones, false, du.view({rows, n}), false).view({n});
    }
    return {dz, dbias};
  }
  void release_saved() override { g_ = Tensor(); }
  const char* name() const override { return "log_sigmoid_gate"; }

 private:
  Tensor g_;
  DType z_dtype_;
  double scale_;
};

class SigmoidExpandNode final : public Node {
 public:
  SigmoidExpandNode(Tensor y, int64_t logits) : y_(std::move(y)), logits_(logits) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {sigmoid_expand_backward(grad_output, y_, logits_)};
  }
  void release_saved() override { y_ = Tensor(); }
  const char* name() const override { return "sigmoid_expand"; }

 private:
  Tensor y_;
  int64_t logits_;
};

}  // namespace

Variable log_sigmoid_gate(const Variable& z, const Variable& bias, double scale) {
  FATHOM_CHECK(z.defined() && bias.defined(), "log_sigmoid_gate: undefined input");
  // The bias is read in its own (fp32 master) precision, not through a bf16 compute copy.
  Tensor g = log_sigmoid_gate_forward(z.value(), bias.value(), scale);
  if (!any_requires_grad({z, bias})) return Variable(std::move(g));
  auto node = std::make_shared<LogSigmoidGateNode>(g, z.dtype(), scale);
  return record(std::move(g), std::move(node), {z, bias});
}

Variable sigmoid_expand(const Variable& logits, int64_t n) {
  FATHOM_CHECK(logits.defined(), "sigmoid_expand: undefined input");
  Tensor y = sigmoid_expand_forward(logits.value(), n);
  if (!any_requires_grad({logits})) return Variable(std::move(y));
  auto node = std::make_shared<SigmoidExpandNode>(y, logits.dim(0));
  return record(std::move(y), std::move(node), {logits});
}

}  // namespace fathom
