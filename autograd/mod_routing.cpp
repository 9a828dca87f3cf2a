// MoD's differentiable routing ops: the gather of the chosen rows, the routed residual that adds their
// weighted block delta back, and the routing BCE. Top-k itself is a discrete choice without gradient.
#include "kernels/mod/mod_routing.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace fathom {

namespace {

class GatherRowsNode final : public Node {
 public:
  GatherRowsNode(Tensor idx, int64_t seq_len) : idx_(std::move(idx)), seq_len_(seq_len) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {scatter_rows(grad_output, idx_, seq_len_)};
  }
  void release_saved() override { idx_ = Tensor(); }
  const char* name() const override { return "gather_rows"; }

 private:
  Tensor idx_;
  int64_t seq_len_;
};

class RoutedMixNode final : public Node {
 public:
  RoutedMixNode(Tensor x, Tensor y, Tensor r, Tensor idx, RouteWeight weight)
      : x_(std::move(x)), y_(std::move(y)), r_(std::move(r)), idx_(std::move(idx)), weight_(weight) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    RoutedMixGrads g = routed_mix_backward(grad_output, x_, y_, r_, idx_, weight_);
    return {needs_input_grad(0) ? g.dx : Tensor(), needs_input_grad(1) ? g.dy : Tensor(),
            needs_input_grad(2) ? g.dr : Tensor()};
  }
  void release_saved() override {
    x_ = Tensor();
    y_ = Tensor();
    r_ = Tensor();
    idx_ = Tensor();
  }
  const char* name() const override { return "routed_mix"; }

 private:
  Tensor x_, y_, r_, idx_;
  RouteWeight weight_;
};

class RoutingBceNode final : public Node {
 public:
  RoutingBceNode(Tensor logits, Tensor targets) : logits_(std::move(logits)), targets_(std::move(targets)) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    return {routing_bce_backward(grad_output, logits_, targets_)};
  }
  void release_saved() override {
    logits_ = Tensor();
    targets_ = Tensor();
  }
  const char* name() const override { return "routing_bce"; }

 private:
  Tensor logits_, targets_;
};

}  // namespace

Variable gather_rows(const Variable& x, const Tensor& idx) {
  FATHOM_CHECK(x.defined(), "gather_rows: undefined input");
  Tensor rows = gather_rows(x.value(), idx);
  if (!any_requires_grad({x})) return Variable(std::move(rows));
  return record(std::move(rows), std::make_shared<GatherRowsNode>(idx, x.dim(1)), {x});
}

Variable routed_mix(const Variable& x, const Variable& y, const Variable& r, const Tensor& idx, RouteWeight weight) {
  FATHOM_CHECK(x.defined() && y.defined() && (weight == RouteWeight::one || r.defined()),
               "routed_mix: undefined input");
  const Variable logits = weight == RouteWeight::one ? Variable() : r;
  const Tensor r_value = logits.defined() ? logits.value() : Tensor();
  Tensor out = routed_mix_forward(x.value(), y.value(), r_value, idx, weight);
  if (!any_requires_grad({x, y, logits})) return Variable(std::move(out));
  return record(std::move(out), std::make_shared<RoutedMixNode>(x.value(), y.value(), r_value, idx, weight),
                {x, y, logits});
}

Variable routing_bce(const Variable& logits, const Tensor& targets) {
  FATHOM_CHECK(logits.defined(), "routing_bce: undefined input");
  Tensor loss = routing_bce_forward(logits.value(), targets);
  if (!any_requires_grad({logits})) return Variable(std::move(loss));
  return record(std::move(loss), std::make_shared<RoutingBceNode>(logits.value(), targets), {logits});
}

}  // namespace fathom
