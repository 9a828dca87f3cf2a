#include <gtest/gtest.h>

#include <vector>
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"

#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(Linear, ForwardMatchesNaiveOverLeadingDims) {
  Tensor x = random_tensor({2, 3, 5}, DType::f32, 1);
  Tensor w = random_tensor({7, 5}, DType::f32, 2);
  Variable y = linear(Variable(x), Variable(w));
  ASSERT_EQ(y.shape(), Shape({2, 3, 7}));
  const std::vector<double> xv = values(x), wv = values(w);
  std::vector<double> want(2 * 3 * 7);
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 7; ++o) {
      double s = 0;
      for (int i = 0; i < 5; ++i) s += xv[r * 5 + i] * wv[o * 5 + i];
      want[r * 7 + o] = s;
    }
  expect_close(y.value(), want, 1e-6, 1e-6);
  EXPECT_FALSE(y.requires_grad());
}

TEST(Linear, Gradcheck) {
  GradcheckResult r = gradcheck([](const std::vector<Variable>& in) { return linear(in[0], in[1]); },
                                {random_tensor({2, 3, 5}, DType::f64, 3), random_tensor({7, 5}, DType::f64, 4)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Linear, OnlyRequestedGradientsAreComputed) {
  Variable x(random_tensor({4, 5}, DType::f64, 5), false);
  Variable w(random_tensor({3, 5}, DType::f64, 6), true);
  Variable y = linear(x, w);
  backward(y, random_tensor({4, 3}, DType::f64, 7));
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Linear, F32AgreesWithF64) {
  Tensor x = random_tensor({6, 33}, DType::f64, 8), w = random_tensor({17, 33}, DType::f64, 9);
  Tensor g = random_tensor({6, 17}, DType::f64, 10);
  Variable x64(x, true), w64(w, true), x32(x.to(DType::f32), true), w32(w.to(DType::f32), true);
  Variable y64 = linear(x64, w64), y32 = linear(x32, w32);
  expect_close(y32.value(), y64.value(), 1e-5, 1e-5);
  backward(y64, g);
  backward(y32, g.to(DType::f32));
  expect_close(x32.grad(), x64.grad(), 1e-5, 1e-5);
  expect_close(w32.grad(), w64.grad(), 1e-5, 1e-5);
}

TEST(Linear, ShapeMismatchIsAnError) {
  Variable x(random_tensor({4, 5}, DType::f32, 1)), w(random_tensor({3, 6}, DType::f32, 2));
  expect_error([&] { linear(x, w); }, {"input width 6", "[4, 5]"});
  expect_error([&] { linear(x, Variable(random_tensor({5}, DType::f32, 3))); }, {"[out, in]"});
}

// The linears of one input: without gradients one matmul_each, with them one recorded linear each; the
// values (and the gradients) are those of one linear per weight either way.
TEST(Linear, EachEqualsOneLinearPerWeight) {
  const Tensor x = random_tensor({2, 3, 8}, DType::f32, 30);
  std::vector<Variable> ws{Variable(random_tensor({5, 8}, DType::f32, 31), true),
                           Variable(random_tensor({2, 8}, DType::f32, 32), true)};
  const Variable* both[] = {&ws[0], &ws[1]};
  {
    NoGrad no_grad;
    const std::vector<Variable> ys = linear_each(Variable(x), both);
    for (size_t i = 0; i < ws.size(); ++i) {
      EXPECT_FALSE(ys[i].requires_grad());
      EXPECT_EQ(ys[i].shape(), (Shape{2, 3, ws[i].dim(0)}));
      EXPECT_EQ(ys[i].value().to_vector<float>(), linear(Variable(x), ws[i]).value().to_vector<float>());
    }
  }
  Variable xv(x, true);
  const std::vector<Variable> ys = linear_each(xv, both);
  const Tensor g0 = random_tensor({2, 3, 5}, DType::f32, 33), g1 = random_tensor({2, 3, 2}, DType::f32, 34);
  backward(ys[0], g0);
  backward(ys[1], g1);
  Variable x1(x, true), x2(x, true);
  Variable w0(ws[0].value(), true), w1(ws[1].value(), true);
  backward(linear(x1, w0), g0);
  backward(linear(x2, w1), g1);
  EXPECT_EQ(ws[0].grad().to_vector<float>(), w0.grad().to_vector<float>());
  EXPECT_EQ(ws[1].grad().to_vector<float>(), w1.grad().to_vector<float>());
  expect_close(xv.grad(), add(Variable(x1.grad()), Variable(x2.grad())).value(), 1e-6, 1e-6);
  expect_error([&] { linear_each(Variable(random_tensor({3, 7}, DType::f32, 35)), both); }, {"input width 8"});
}
