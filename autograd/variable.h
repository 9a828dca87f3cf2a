// Variable: a tensor in the autograd graph. Leaves (parameters, inputs) carry an accumulated
// gradient; results of differentiable ops carry the Node that produced them.
#pragma once
#include <memory>

#include "core/tensor.h"

namespace fathom {

class Node;
class Rebuild;

struct VariableImpl {
  Tensor value;
  Tensor grad;  // leaves only; parameters point it into the flat gradient arena
  // Mixed precision: a parameter's low-precision (BF16) copy of `value` that the ops compute with,
  // a view into the arena's compute copy; undefined otherwise. Gradients still go to `grad` (F32).
  Tensor compute;
  std::shared_ptr<Node> grad_fn;  // producer; null for leaves
  // Selective recompute: how consumers' nodes rebuild `value` instead of keeping it (saved_tensor.h).
  std::shared_ptr<Rebuild> rebuild;
  bool requires_grad = false;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& value() { return impl_->value; }
  const Shape& shape() const { return impl_->value.shape(); }
  int64_t dim(int i) const { return impl_->value.dim(i); }
  DType dtype() const { return impl_->value.dtype(); }
  Device device() const { return impl_->value.device(); }

  // What ops read: the compute copy when there is one (mixed precision), else the value.
  const Tensor& compute_value() const { return impl_->compute.defined() ? impl_->compute : impl_->value; }
  bool has_compute_copy() const { return impl_->compute.defined(); }

  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  const Tensor& grad() const { return impl_->grad; }
  void set_grad(Tensor grad) { impl_->grad = std::move(grad); }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  bool is_leaf() const { return impl_->grad_fn == nullptr; }

  // Same value, cut from the graph.
  Variable detach() const { return Variable(impl_->value, false); }
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<VariableImpl> impl_;
};

}  // namespace fathom
