#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(Arithmetic, AddAndScaleMatchFormula) {
  Tensor a = random_tensor({3, 5}, DType::f32, 1), b = random_tensor({3, 5}, DType::f32, 2);
  const std::vector<double> av = values(a), bv = values(b);
  std::vector<double> sum(av.size()), scaled(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    sum[i] = av[i] + bv[i];
    scaled[i] = -2.5 * av[i];
  }
  expect_close(add(Variable(a), Variable(b)).value(), sum, 1e-6, 1e-6);
  Variable s = scale(Variable(a), -2.5);
  expect_close(s.value(), scaled, 1e-6, 1e-6);
  expect_close(a, av, 0, 0, "scale must not modify its input");
}

TEST(Arithmetic, Gradcheck) {
  auto f = [](const std::vector<Variable>& in) { return add(scale(in[0], 0.7), in[1]); };
  GradcheckResult r = gradcheck(f, {random_tensor({2, 3}, DType::f64, 3), random_tensor({2, 3}, DType::f64, 4)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Arithmetic, F32AgreesWithF64) {
  Tensor a = random_tensor({17}, DType::f64, 5), b = random_tensor({17}, DType::f64, 6);
  expect_close(add(Variable(scale(Variable(a.to(DType::f32)), 3.0).value()), Variable(b.to(DType::f32))).value(),
               add(scale(Variable(a), 3.0), Variable(b)).value(), 1e-6, 1e-6);
}

TEST(Arithmetic, MismatchedShapesAreErrors) {
  expect_error([] { add(Variable(random_tensor({3}, DType::f32, 1)), Variable(random_tensor({4}, DType::f32, 2))); },
               {"differ in shape or dtype"});
  expect_error([] { add(Variable(random_tensor({3}, DType::f32, 1)), Variable(random_tensor({3}, DType::f64, 2))); },
               {"differ in shape or dtype"});
}

TEST(Cast, RoundsForwardAndCastsTheGradientBack) {
  Variable x(Tensor::from_vector<float>({1.0f, 1.00390625f, -2.5f, 3.14159f}, {4}), true);
  Variable y = cast(x, DType::bf16);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.value().to(DType::f32).to_vector<float>()[3], bf16_to_float(float_to_bf16(3.14159f)));
  fathom::backward(cast(y, DType::f32), Tensor::from_vector<float>({1, 2, 3, 4}, {4}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(x.grad().dtype(), DType::f32);
}
