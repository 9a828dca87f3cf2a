// Backward's report of final leaf gradients (autograd/gradient_ready.h): each leaf once, when no node
// left can add to it, with a checkpoint's declared parameters after the checkpoint; a segment that
// reads a parameter it did not declare is an error, not a stale report.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/engine.h"
#include "autograd/gradient_ready.h"
#include "autograd/ops.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// The leaves in report order, each with its gradient as it was at that moment.
struct Recorder final : GradientListener {
  std::vector<const VariableImpl*> order;
  std::vector<Tensor> at_report;
  void gradient_final(const VariableImpl& leaf) override {
    order.push_back(&leaf);
    at_report.push_back(leaf.grad.defined() ? leaf.grad.clone() : Tensor());
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST(GradientReady, EachLeafOnceWhenItsLastUseHasRun) {
  const Variable x(random_tensor({3, 4}, DType::f32, 1));  // an input: no gradient, no report
  Variable w1(random_tensor({4, 4}, DType::f32, 2), true), w2(random_tensor({5, 4}, DType::f32, 3), true);
  // w1 twice (its two uses both run before w2's in forward order, so after it in backward).
  const Variable h = add(linear(x, w1), linear(x, w1));
  const Variable y = linear(h, w2);
  Recorder recorder;
  {
    ListenToGradients listening(recorder);
    backward(y, random_tensor({3, 5}, DType::f32, 4));
  }
  ASSERT_EQ(recorder.order.size(), 2u);
  EXPECT_EQ(recorder.order[0], w2.impl().get());
  EXPECT_EQ(recorder.order[1], w1.impl().get());
  // Final when reported: nothing added to either gradient after.
  EXPECT_TRUE(same_bits(recorder.at_report[0], w2.grad()));
  EXPECT_TRUE(same_bits(recorder.at_report[1], w1.grad()));
  // Once the listener's scope has ended, backward reports nothing more to it.
  backward(linear(x, w2), random_tensor({3, 5}, DType::f32, 5));
  EXPECT_EQ(recorder.order.size(), 2u);
}

TEST(GradientReady, CheckpointedParametersAreFinalAfterTheCheckpoint) {
  const Variable x(random_tensor({2, 4}, DType::f32, 6));
  Variable inner(random_tensor({4, 4}, DType::f32, 7), true), head(random_tensor({3, 4}, DType::f32, 8), true);
  // `inner` is read inside the segment and after it: its last write is the checkpoint's re-run.
  const Variable h = checkpoint([&](const Variable& v) { return linear(v, inner); }, x, {inner});
  const Variable y = linear(add(h, linear(h, inner)), head);
  Recorder recorder;
  {
    ListenToGradients listening(recorder);
    backward(y, random_tensor({2, 3}, DType::f32, 9));
  }
  ASSERT_EQ(recorder.order.size(), 2u);
  EXPECT_EQ(recorder.order[0], head.impl().get());
  EXPECT_EQ(recorder.order[1], inner.impl().get());
  EXPECT_TRUE(same_bits(recorder.at_report[1], inner.grad()));
}

TEST(GradientReady, ASegmentReadingAnUndeclaredParameterIsAnError) {
  const Variable x(random_tensor({2, 4}, DType::f32, 10));
  Variable w(random_tensor({4, 4}, DType::f32, 11), true);
  auto build = [&] {
    const Variable h = checkpoint([&](const Variable& v) { return linear(v, w); }, x);  // w not declared
    return linear(h, w);
  };
  // Without a listener the gradients are the ordinary ones: nothing is reported, nothing checked.
  EXPECT_NO_THROW(backward(build(), random_tensor({2, 4}, DType::f32, 12)));
  Recorder recorder;
  ListenToGradients listening(recorder);
  const Variable y = build();
  try {
    backward(y, random_tensor({2, 4}, DType::f32, 12));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a checkpoint segment must declare every parameter it reads"),
              std::string::npos)
        << e.what();
  }
}
