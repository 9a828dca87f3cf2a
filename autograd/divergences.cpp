#include "autograd/divergences.h"

#include <cmath>

#include "autograd/node.h"
#include "core/error.h"
#include "kernels/divergences/divergences.h"

namespace fathom {

namespace {

// The teacher's tensor in the student's dtype and on its device (a copy only where they differ).
Tensor as_input(const Tensor& target, const Tensor& input) { return target.to(input.device()).to(input.dtype()); }

class MseNode final : public Node {
 public:
  MseNode(Tensor x, Tensor target) : x_(std::move(x)), target_(std::move(target)) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override { return {mse_backward(grad_output, x_, target_)}; }
  void release_saved() override { x_ = target_ = Tensor(); }
  const char* name() const override { return "mse_to_target"; }

 private:
  Tensor x_, target_;
};

class SoftmaxKlNode final : public Node {
 public:
  SoftmaxKlNode(Tensor student, Tensor teacher, SoftmaxKlOutput forward, double temperature)
      : student_(std::move(student)),
        teacher_(std::move(teacher)),
        forward_(std::move(forward)),
        temperature_(temperature) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {
        softmax_kl_backward(grad_output, student_, teacher_, forward_.lse_student, forward_.lse_teacher, temperature_)};
  }
  void release_saved() override {
    student_ = teacher_ = Tensor();
    forward_ = SoftmaxKlOutput{};
  }
  const char* name() const override { return "softmax_kl_to_target"; }

 private:
  Tensor student_, teacher_;
  SoftmaxKlOutput forward_;
  double temperature_;
};

class RowCosineNode final : public Node {
 public:
  RowCosineNode(Tensor a, Tensor b, Tensor sums) : a_(std::move(a)), b_(std::move(b)), sums_(std::move(sums)) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    auto [ga, gb] = row_cosine_backward(grad_output, a_, b_, sums_);
    return {needs_input_grad(0) ? ga : Tensor(), needs_input_grad(1) ? gb : Tensor()};
  }
  void release_saved() override { a_ = b_ = sums_ = Tensor(); }
  const char* name() const override { return "mean_row_cosine"; }

 private:
  Tensor a_, b_, sums_;
};

void check_shapes(const char* op, const Variable& x, const Tensor& target) {
  FATHOM_CHECK(x.defined() && target.defined() && x.value().shape() == target.shape(), op, ": input ",
               x.defined() ? describe(x.value()) : "undefined", " and target ", describe(target),
               " must have one shape");
}

}  // namespace

Variable mse_to_target(const Variable& x, const Tensor& target) {
  check_shapes("mse_to_target", x, target);
  const Tensor t = as_input(target, x.value());
  Tensor y = mse_forward(x.value(), t);
  if (!any_requires_grad({x})) return Variable(std::move(y));
  return record(std::move(y), std::make_shared<MseNode>(x.value(), t), {x});
}

Variable softmax_kl_to_target(const Variable& x, const Tensor& target, double temperature) {
  check_shapes("softmax_kl_to_target", x, target);
  FATHOM_CHECK(std::isfinite(temperature) && temperature > 0, "softmax_kl_to_target: temperature must be > 0, got ",
               temperature);
  const Tensor t = as_input(target, x.value());
  SoftmaxKlOutput forward = softmax_kl_forward(x.value(), t, temperature);
  Tensor y = forward.loss;
  if (!any_requires_grad({x})) return Variable(std::move(y));
  forward.loss = Tensor();
  return record(std::move(y), std::make_shared<SoftmaxKlNode>(x.value(), t, std::move(forward), temperature), {x});
}

Variable mean_row_cosine(const Variable& a, const Variable& b) {
  FATHOM_CHECK(a.defined() && b.defined() && a.value().shape() == b.value().shape(), "mean_row_cosine: inputs ",
               a.defined() ? describe(a.value()) : "undefined", " and ",
               b.defined() ? describe(b.value()) : "undefined", " must have one shape");
  RowCosineOutput forward = row_cosine_forward(a.value(), b.value());
  if (!any_requires_grad({a, b})) return Variable(std::move(forward.loss));
  return record(std::move(forward.loss), std::make_shared<RowCosineNode>(a.value(), b.value(), std::move(forward.sums)),
                {a, b});
}

}  // namespace fathom
