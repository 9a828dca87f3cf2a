// dsla_attention: the dual-state gated linear-attention mixer; saves its inputs (and, from the CUDA bf16
// kernels, the chunks' intra-chunk scores), the backward kernels recompute the chunk states from them.
#include "kernels/dsla/dsla.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace fathom {

namespace {

class DslaNode final : public Node {
 public:
  DslaNode(Tensor q, Tensor k, Tensor v, Tensor g1, Tensor g2, Tensor gamma, Tensor scores)
      : q_(std::move(q)),
        k_(std::move(k)),
        v_(std::move(v)),
        g1_(std::move(g1)),
        g2_(std::move(g2)),
        gamma_(std::move(gamma)),
        scores_(std::move(scores)) {}

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    DslaGrads g = dsla_backward(grad_output, q_, k_, v_, g1_, g2_, gamma_, scores_);
    const Tensor* all[] = {&g.dq, &g.dk, &g.dv, &g.dg1, &g.dg2, &g.dgamma};
    std::vector<Tensor> out;
    for (size_t i = 0; i < 6; ++i) out.push_back(needs_input_grad(i) ? *all[i] : Tensor());
    return out;
  }
  void release_saved() override { q_ = k_ = v_ = g1_ = g2_ = gamma_ = scores_ = Tensor(); }
  const char* name() const override { return "dsla_attention"; }

 private:
  Tensor q_, k_, v_, g1_, g2_, gamma_, scores_;
};

Tensor value_or_undefined(const Variable& x) { return x.defined() ? x.value() : Tensor(); }

}  // namespace

Variable dsla_attention(const Variable& q, const Variable& k, const Variable& v, const Variable& g1, const Variable& g2,
                        const Variable& gamma) {
  FATHOM_CHECK(q.defined() && k.defined() && v.defined() && g1.defined(),
               "dsla_attention: undefined input (q, k, v and g1 are required)");
  const Tensor g2v = value_or_undefined(g2), gammav = value_or_undefined(gamma);
  const bool backward = any_requires_grad({q, k, v, g1, g2, gamma});
  DslaForward out = dsla_forward(q.value(), k.value(), v.value(), g1.value(), g2v, gammav, {}, false, backward);
  if (!backward) return Variable(std::move(out.o));
  auto node =
      std::make_shared<DslaNode>(q.value(), k.value(), v.value(), g1.value(), g2v, gammav, std::move(out.scores));
  return record(std::move(out.o), std::move(node), {q, k, v, g1, g2, gamma});
}

}  // namespace fathom
