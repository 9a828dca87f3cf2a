// The backward engine with real ops: gradients of values used more than once add up, and each node
// frees what it saved as soon as it has run.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
Tensor plus(const Tensor& a, const Tensor& b) { return add(a, b); }  // the kernel, not the autograd op
Tensor times(const Tensor& a, double s) {
  Tensor t = a.clone();
  scale_inplace(t, s);
  return t;
}
}  // namespace

TEST(Engine, InputUsedByTwoOpsAccumulates) {
  Variable x(random_tensor({5, 4}, DType::f64, 1), true);
  Variable w1(random_tensor({3, 4}, DType::f64, 2)), w2(random_tensor({3, 4}, DType::f64, 3));
  Tensor g = random_tensor({5, 3}, DType::f64, 4);
  backward(add(linear(x, w1), linear(x, w2)), g);
  // d/dx of g . (x W1^T + x W2^T) = g W1 + g W2
  expect_close(x.grad(), plus(matmul(g, false, w1.value(), false), matmul(g, false, w2.value(), false)), 1e-12, 1e-12);
}

TEST(Engine, SameVariableTwiceInOneOpAndIntermediateReused) {
  Variable x(random_tensor({6}, DType::f64, 5), true);
  Tensor g = random_tensor({6}, DType::f64, 6);
  backward(add(x, x), g);
  expect_close(x.grad(), times(g, 2.0), 1e-15, 0);

  // h feeds two ops; its gradient (g + 3 g) must reach x through one linear.
  Variable x2(random_tensor({2, 4}, DType::f64, 7), true);
  Variable w(random_tensor({5, 4}, DType::f64, 8), true);
  Variable h = linear(x2, w);
  Tensor g2 = random_tensor({2, 5}, DType::f64, 9);
  backward(add(h, scale(h, 3.0)), g2);
  expect_close(x2.grad(), matmul(times(g2, 4.0), false, w.value(), false), 1e-12, 1e-12);
  expect_close(w.grad(), matmul(times(g2, 4.0), true, x2.value(), false), 1e-12, 1e-12);
}

// h feeds two linears and a residual add. The add hands one gradient tensor to both its inputs, so
// h's first sum must go to a copy; later linears then add their dx into h's sum inside their
// product (C = A B + C). Neither may change the caller's seed.
TEST(Engine, GradientSumsOfIntermediatesAreAddedInPlaceOnlyWhenUnshared) {
  Variable x(random_tensor({5, 4}, DType::f64, 12), true);
  Variable w0(random_tensor({3, 4}, DType::f64, 13)), w1(random_tensor({3, 3}, DType::f64, 14)),
      w2(random_tensor({3, 3}, DType::f64, 15));
  const Variable h = linear(x, w0);
  const Tensor g = random_tensor({5, 3}, DType::f64, 16);
  const Tensor seed = g.clone();
  backward(add(add(linear(h, w1), linear(h, w2)), h), seed);
  const Tensor dh = plus(plus(matmul(g, false, w1.value(), false), matmul(g, false, w2.value(), false)), g);
  expect_close(x.grad(), matmul(dh, false, w0.value(), false), 1e-12, 1e-12);
  expect_close(seed, g, 0, 0);
}

TEST(Engine, LeafGradientsAccumulateAcrossBackwardCalls) {
  Variable x(random_tensor({3}, DType::f64, 10), true);
  Tensor g = random_tensor({3}, DType::f64, 11);
  backward(scale(x, 2.0), g);
  backward(scale(x, 5.0), g);
  expect_close(x.grad(), times(g, 7.0), 1e-15, 0);
}

namespace {
// Counts release_saved calls of a node that saves one tensor.
class CountingNode final : public Node {
 public:
  explicit CountingNode(Tensor saved, int* releases) : saved_(std::move(saved)), releases_(releases) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    EXPECT_TRUE(saved_.defined()) << "saved tensor released before backward ran";
    return {g};
  }
  void release_saved() override {
    saved_ = Tensor();
    ++*releases_;
  }
  const char* name() const override { return "counting"; }

 private:
  Tensor saved_;
  int* releases_;
};

size_t live_tensor_bytes() { return allocator_for(Device::cpu()).stats(Device::cpu()).current; }
}  // namespace

TEST(Engine, EveryNodeReleasesItsSavedTensorsOnce) {
  int releases = 0;
  Variable x(random_tensor({4}, DType::f64, 12), true);
  Variable a = record(x.value().clone(), std::make_shared<CountingNode>(x.value(), &releases), {x});
  Variable b = record(a.value().clone(), std::make_shared<CountingNode>(a.value(), &releases), {a});
  std::shared_ptr<Node> first = a.grad_fn();
  backward(b, random_tensor({4}, DType::f64, 13));
  EXPECT_EQ(releases, 2);
  EXPECT_TRUE(first->edges().empty());  // edges are dropped too, so the graph no longer pins its inputs
}

TEST(Engine, BackwardFreesActivationsSavedByOps) {
  // Three 8 MB activations (the two swiglu inputs and its output) live only inside the graph.
  const int64_t n = 2000, wide = 512;
  Variable x(random_tensor({n, 8}, DType::f64, 14), true);
  Variable w1(random_tensor({wide, 8}, DType::f64, 15), true), w2(random_tensor({wide, 8}, DType::f64, 16), true);
  Variable w3(random_tensor({8, wide}, DType::f64, 17), true);
  Variable y = linear(swiglu(linear(x, w1), linear(x, w2)), w3);
  const size_t activation_bytes = 3 * size_t(n * wide) * sizeof(double);
  // Keep every node alive, so that only release_saved (not node destruction) can free the activations.
  std::vector<std::shared_ptr<Node>> nodes{y.grad_fn()};
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Edge& e : nodes[i]->edges())
      if (e.node) nodes.push_back(e.node);
  ASSERT_EQ(nodes.size(), 4u);  // linear, swiglu, linear, linear
  const size_t before = live_tensor_bytes();
  backward(y, random_tensor({n, 8}, DType::f64, 18));
  const size_t after = live_tensor_bytes();
  // The new leaf gradients are small.
  EXPECT_LT(after + activation_bytes * 9 / 10, before) << "before " << before << " after " << after;
  EXPECT_TRUE(x.grad().defined() && w1.grad().defined() && w3.grad().defined());
}
