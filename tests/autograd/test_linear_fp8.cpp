// linear_fp8 on the CPU (the FP8 emulation): its forward is exactly the FP8 GEMM of the quantized
// operands, and forward and gradients agree with the f32 linear within what FP8 rounding allows.
//
// The bounds: rounding to nearest with m mantissa bits changes each value by at most 2^-(m+1) of itself
// (e4m3: 2^-4 = 6.3%, e5m2: 2^-3 = 12.5%) and on average about a third of that, independently per
// element, so the relative L2 error of a product of random operands is about sqrt(ua^2 + ub^2) / sqrt(3):
// 3.6% for e4m3 x e4m3, 6.5% for e5m2 x e4m3. The tests allow 6% and 10%.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "kernels/fp8/fp8.h"
#include "kernels/matmul/fp8_matmul.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

double relative_l2(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values(got), w = values(want);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST(LinearFp8, ForwardIsTheFp8GemmOfTheQuantizedOperands) {
  const Tensor x = random_tensor({2, 7, 32}, DType::f32, 1), w = random_tensor({48, 32}, DType::f32, 2, -0.1, 0.1);
  const Variable y = linear_fp8(Variable(x), Variable(w));
  ASSERT_EQ(y.shape(), Shape({2, 7, 48}));
  const Fp8Tensor xq = fp8_quantize(x, DType::e4m3, false), wq = fp8_quantize(w, DType::e4m3, false);
  Tensor want = Tensor::empty({14, 48}, DType::f32);
  fp8_matmul(xq.data, xq.scale_inv, wq.data, wq.scale_inv, want);
  EXPECT_EQ(y.value().to_vector<float>(), want.to_vector<float>());
}

TEST(LinearFp8, AgreesWithTheF32LinearWithinFp8Rounding) {
  const Tensor x = random_tensor({3, 37, 64}, DType::f32, 3), w = random_tensor({96, 64}, DType::f32, 4, -0.2, 0.2);
  const Tensor g = random_tensor({3, 37, 96}, DType::f32, 5);
  Variable x8(x, true), w8(w, true), x32(x, true), w32(w, true);
  const Variable y8 = linear_fp8(x8, w8), y32 = linear(x32, w32);
  const double forward = relative_l2(y8.value(), y32.value());
  backward(y8, g);
  backward(y32, g);
  const double dx = relative_l2(x8.grad(), x32.grad()), dw = relative_l2(w8.grad(), w32.grad());
  EXPECT_LE(forward, 0.06);
  EXPECT_LE(dx, 0.10);
  EXPECT_LE(dw, 0.10);
  EXPECT_GT(forward, 1e-4) << "the FP8 path really rounds";
  std::printf("relative L2 error against f32: forward %.4f, dx %.4f, dW %.4f\n", forward, dx, dw);
}

TEST(LinearFp8, GradientsAreTheFp8GemmsOfTheQuantizedGradient) {
  const Tensor x = random_tensor({21, 32}, DType::f32, 6), w = random_tensor({16, 32}, DType::f32, 7);
  const Tensor g = random_tensor({21, 16}, DType::f32, 8);
  Variable xv(x, true), wv(w, true);
  backward(linear_fp8(xv, wv), g);
  const Fp8Tensor gq = fp8_quantize(g, DType::e5m2, true);
  const Fp8Tensor wt = fp8_cast_transpose(w, fp8_amax(w), DType::e4m3, false);
  const Fp8Tensor xt = fp8_cast_transpose(x, fp8_amax(x), DType::e4m3, false);
  Tensor dx = Tensor::empty({21, 32}, DType::f32), dw = Tensor::empty({16, 32}, DType::f32);
  fp8_matmul(gq.data, gq.scale_inv, wt.transposed, wt.scale_inv, dx);
  fp8_matmul(gq.transposed, gq.scale_inv, xt.transposed, xt.scale_inv, dw);
  EXPECT_EQ(xv.grad().to_vector<float>(), dx.to_vector<float>());
  EXPECT_EQ(wv.grad().to_vector<float>(), dw.to_vector<float>());
}

TEST(LinearFp8, AnInputReadByTwoLinearsSumsBothGradients) {
  const Tensor x = random_tensor({9, 32}, DType::f32, 9), g = random_tensor({9, 32}, DType::f32, 15);
  const Tensor w1 = random_tensor({32, 32}, DType::f32, 10), w2 = random_tensor({32, 32}, DType::f32, 11);
  Variable both(x, true), only1(x, true), only2(x, true);
  backward(add(linear_fp8(both, Variable(w1)), linear_fp8(both, Variable(w2))), g);
  backward(linear_fp8(only1, Variable(w1)), g);
  backward(linear_fp8(only2, Variable(w2)), g);
  const std::vector<float> got = both.grad().to_vector<float>(), a = only1.grad().to_vector<float>(),
                           b = only2.grad().to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], a[i] + b[i], 1e-5f * (1 + std::fabs(a[i] + b[i])));
}

TEST(LinearFp8, OnlyRequestedGradientsAreComputed) {
  Variable x(random_tensor({4, 16}, DType::f32, 12), false), w(random_tensor({16, 16}, DType::f32, 13), true);
  backward(linear_fp8(x, w), random_tensor({4, 16}, DType::f32, 14));
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  Variable x2(random_tensor({4, 16}, DType::f32, 12), true), frozen(random_tensor({16, 16}, DType::f32, 13), false);
  backward(linear_fp8(x2, frozen), random_tensor({4, 16}, DType::f32, 14));
  EXPECT_TRUE(x2.grad().defined());
  EXPECT_FALSE(frozen.grad().defined());
}

TEST(LinearFp8, BadInputsAreErrors) {
  Variable x(random_tensor({4, 24}, DType::f32, 1)), w(random_tensor({16, 24}, DType::f32, 2));
  expect_error([&] { linear_fp8(x, w); }, {"linear_fp8", "multiples of 16", "[16, 24]"});
  Variable x16(random_tensor({4, 16}, DType::f32, 3)), w32(random_tensor({16, 32}, DType::f32, 4));
  expect_error([&] { linear_fp8(x16, w32); }, {"input width 32"});
  Variable x64(random_tensor({4, 16}, DType::f64, 5)), w16(random_tensor({16, 16}, DType::f64, 6));
  expect_error([&] { linear_fp8(x64, w16); }, {"F32 or BF16", "F64"});
}

// The linears of one input share x's casts: the outputs and every gradient are those of one linear_fp8 per
// weight, bit for bit (the casts are exact functions of x), with the input's gradient and without.
TEST(LinearFp8, EachSharesTheInputsCastsAndEqualsOneCallPerWeight) {
  const Tensor x = random_tensor({9, 32}, DType::f32, 20);
  const std::vector<Tensor> ws{random_tensor({48, 32}, DType::f32, 21), random_tensor({16, 32}, DType::f32, 22),
                               random_tensor({16, 32}, DType::f32, 23)};
  const std::vector<Tensor> gs{random_tensor({9, 48}, DType::f32, 24), random_tensor({9, 16}, DType::f32, 25),
                               random_tensor({9, 16}, DType::f32, 26)};
  for (const bool x_grad : {true, false}) {
    Variable x_each(x, x_grad), x_one(x, x_grad);
    std::vector<Variable> w_each, w_one;
    for (const Tensor& w : ws) {
      w_each.emplace_back(w, true);
      w_one.emplace_back(w, true);
    }
    const Variable* each[] = {&w_each[0], &w_each[1], &w_each[2]};
    const std::vector<Variable> y_each = linear_fp8_each(x_each, each);
    std::vector<Variable> y_one;
    for (const Variable& w : w_one) y_one.push_back(linear_fp8(x_one, w));
    for (size_t i = 0; i < ws.size(); ++i)
      EXPECT_EQ(y_each[i].value().to_vector<float>(), y_one[i].value().to_vector<float>()) << "output " << i;
    // One backward per output, in the same order for both: the shared transpose made by the first is
    // reused by the other two.
    for (size_t i = 0; i < ws.size(); ++i) {
      backward(y_each[i], gs[i]);
      backward(y_one[i], gs[i]);
    }
    for (size_t i = 0; i < ws.size(); ++i)
      EXPECT_EQ(w_each[i].grad().to_vector<float>(), w_one[i].grad().to_vector<float>()) << "weight " << i;
    if (x_grad) {
      EXPECT_EQ(x_each.grad().to_vector<float>(), x_one.grad().to_vector<float>());
    }
  }
}
