#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(Reshape, IsAViewAndGradientComesBackInTheInputShape) {
  Variable x(random_tensor({2, 3, 4}, DType::f64, 1), true);
  Variable y = reshape(x, {6, 4});
  EXPECT_EQ(y.shape(), Shape({6, 4}));
  EXPECT_TRUE(y.value().shares_storage_with(x.value()));
  EXPECT_EQ(values(y.value()), values(x.value()));
  Tensor g = random_tensor({6, 4}, DType::f64, 2);
  backward(y, g);
  EXPECT_EQ(x.grad().shape(), Shape({2, 3, 4}));
  EXPECT_EQ(values(x.grad()), values(g));
}

TEST(Reshape, GradcheckThroughHeadSplit) {
  // The attention path: [B, T, H*d] -> [B, T, H, d], a head-wise op, and back.
  auto f = [](const std::vector<Variable>& in) {
    Variable heads = reshape(in[0], {2, 3, 2, 4});
    return reshape(rms_norm(heads, in[1], 1e-6), {2, 3, 8});
  };
  GradcheckResult r = gradcheck(f, {random_tensor({2, 3, 8}, DType::f64, 3), random_tensor({4}, DType::f64, 4)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Reshape, F32AgreesWithF64) {
  Tensor x = random_tensor({4, 6}, DType::f64, 5);
  expect_close(reshape(Variable(x.to(DType::f32)), {3, 8}).value(), reshape(Variable(x), {3, 8}).value(), 1e-7, 1e-7);
}

TEST(Reshape, WrongElementCountIsAnError) {
  expect_error([] { reshape(Variable(random_tensor({2, 3}, DType::f32, 1)), {4, 2}); }, {"cannot view", "[4, 2]"});
}
