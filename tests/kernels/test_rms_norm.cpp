#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/rms_norm/rms_norm.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
struct NaiveRmsNorm {
  std::vector<double> y, dx, dw;
};
// y = x / sqrt(mean(x^2) + eps) * w; gradients of sum(g * y) written out by the quotient rule.
NaiveRmsNorm naive_rms_norm(const Tensor& x, const Tensor& w, const Tensor& g, double eps) {
  const std::vector<double> xv = values(x), wv = values(w), gv = values(g);
  const int64_t n = w.numel(), rows = x.numel() / n;
  NaiveRmsNorm out{std::vector<double>(xv.size()), std::vector<double>(xv.size()), std::vector<double>(size_t(n))};
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += xv[r * n + i] * xv[r * n + i] / double(n);
    const double rms = std::sqrt(ms + eps);
    double dot = 0;  // sum_i g_i w_i x_i
    for (int64_t i = 0; i < n; ++i) dot += gv[r * n + i] * wv[i] * xv[r * n + i];
    for (int64_t i = 0; i < n; ++i) {
      const double x_i = xv[r * n + i];
      out.y[r * n + i] = x_i / rms * wv[i];
      // d y_j / d x_i = w_j (delta_ij / rms - x_j x_i / (n rms^3))
      out.dx[r * n + i] = gv[r * n + i] * wv[i] / rms - x_i * dot / (double(n) * rms * rms * rms);
      out.dw[i] += gv[r * n + i] * x_i / rms;
    }
  }
  return out;
}
}  // namespace

TEST(RmsNorm, MatchesNaiveFormulaAcrossRowBlocks) {
  // 300 rows span several of the backward's 64-row reduction blocks, with a ragged tail; the
  // second shape is large enough for the multi-threaded path.
  for (Shape shape : {Shape{3, 100, 24}, Shape{2, 4100, 130}})
    for (DType dt : {DType::f32, DType::f64}) {
      const int64_t n = shape.last();
      Tensor x = random_tensor(shape, dt, 1, -2, 2);
      Tensor w = random_tensor({n}, dt, 2, 0.5, 1.5);
      Tensor g = random_tensor(shape, dt, 3);
      const NaiveRmsNorm want = naive_rms_norm(x, w, g, 1e-6);
      RmsNormOutput out = rms_norm_forward(x, w, 1e-6);
      RmsNormGrads grads = rms_norm_backward(g, x, w, out.rstd);
      const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
      expect_close(out.y, want.y, tol, tol, "y");
      expect_close(grads.dx, want.dx, tol, tol, "dx");
      expect_close(grads.dweight, want.dw, 1e-3 * tol * double(shape.rows()), tol, "dweight");
      EXPECT_EQ(out.rstd.shape(), Shape({shape.rows()}));
    }
}

TEST(RmsNorm, GradcheckFullWidthAndPerHead) {
  // Full-width (weight over H*d) and per-head (x [.., H, d], weight [d]) as QK-norm uses them.
  auto f = [](const std::vector<Variable>& in) { return rms_norm(in[0], in[1], 1e-5); };
  GradcheckResult full = gradcheck(f, {random_tensor({2, 3, 15}, DType::f64, 4), random_tensor({15}, DType::f64, 5)});
  EXPECT_TRUE(full.ok) << full.message;
  GradcheckResult head = gradcheck(f, {random_tensor({2, 3, 5, 3}, DType::f64, 6), random_tensor({3}, DType::f64, 7)});
  EXPECT_TRUE(head.ok) << head.message;
}

// The residual form adds the residual in the same pass: y = residual + norm(x), same rstd, and the
// residual's gradient is the output's.
TEST(RmsNorm, ResidualFormAddsTheResidual) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = random_tensor({2, 70, 24}, dt, 11, -2, 2), w = random_tensor({24}, dt, 12, 0.5, 1.5);
    const Tensor residual = random_tensor({2, 70, 24}, dt, 13);
    const RmsNormOutput plain = rms_norm_forward(x, w, 1e-6);
    const RmsNormOutput fused = rms_norm_forward(x, w, 1e-6, residual);
    std::vector<double> want = values(plain.y);
    const std::vector<double> r = values(residual);
    for (size_t i = 0; i < want.size(); ++i) want[i] += r[i];
    const double tol = dt == DType::f32 ? 1e-6 : 1e-14;
    expect_close(fused.y, want, tol, tol, "y");
    EXPECT_EQ(values(fused.rstd), values(plain.rstd));
  }
  auto f = [](const std::vector<Variable>& in) { return residual_rms_norm(in[0], in[1], in[2], 1e-5); };
  GradcheckResult r = gradcheck(f, {random_tensor({2, 3, 15}, DType::f64, 14),
                                    random_tensor({2, 3, 15}, DType::f64, 15), random_tensor({15}, DType::f64, 16)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(RmsNorm, F32AgreesWithF64) {
  Tensor x = random_tensor({50, 128}, DType::f64, 8), w = random_tensor({128}, DType::f64, 9);
  Tensor g = random_tensor({50, 128}, DType::f64, 10);
  Variable x64(x, true), w64(w, true), x32(x.to(DType::f32), true), w32(w.to(DType::f32), true);
  Variable y64 = rms_norm(x64, w64, 1e-6), y32 = rms_norm(x32, w32, 1e-6);
  expect_close(y32.value(), y64.value(), 1e-5, 1e-5);
  backward(y64, g);
  backward(y32, g.to(DType::f32));
  expect_close(x32.grad(), x64.grad(), 1e-5, 1e-5);
  expect_close(w32.grad(), w64.grad(), 1e-4, 1e-5);
}

TEST(RmsNorm, StatisticsDoNotOverflowInF32) {
  // Squares of 1e20 overflow float; the double accumulation keeps the row finite and unit-RMS.
  Tensor x = Tensor::full({1, 8}, 1e20, DType::f32);
  RmsNormOutput out = rms_norm_forward(x, Tensor::full({8}, 1.0, DType::f32), 1e-6);
  expect_close(out.y, std::vector<double>(8, 1.0), 1e-6, 1e-6);
}

TEST(RmsNorm, BadInputsAreErrors) {
  Variable x(random_tensor({4, 6}, DType::f32, 1));
  expect_error([&] { rms_norm(x, Variable(random_tensor({5}, DType::f32, 2)), 1e-6); }, {"weight", "[6]"});
  expect_error([&] { rms_norm(x, Variable(random_tensor({6}, DType::f64, 2)), 1e-6); }, {"dtype"});
  expect_error([&] { rms_norm(x, Variable(random_tensor({6}, DType::f32, 2)), 0.0); }, {"eps"});
  expect_error(
      [&] {
        residual_rms_norm(Variable(random_tensor({4, 5}, DType::f32, 5)), x,
                          Variable(random_tensor({6}, DType::f32, 2)), 1e-6);
      },
      {"residual", "[4, 5]", "must match x"});
  expect_error(
      [&] {
        residual_rms_norm(Variable(random_tensor({4, 6}, DType::f64, 5)), x,
                          Variable(random_tensor({6}, DType::f32, 2)), 1e-6);
      },
      {"residual", "must match x"});
  RmsNormOutput out = rms_norm_forward(x.value(), random_tensor({6}, DType::f32, 3), 1e-6);
  expect_error(
      [&] {
        rms_norm_backward(random_tensor({4, 5}, DType::f32, 4), x.value(), random_tensor({6}, DType::f32, 3), out.rstd);
      },
      {"grad_y"});
}

// The pre-norm residual step: the kernel's sum and norm are add's and rms_norm's, and the autograd op
// gives the same values with gradients recorded (two ops) and without (the one pass where it takes it).
TEST(RmsNorm, AddThenNormIsTheAddFollowedByTheNorm) {
  const Tensor r = random_tensor({3, 5, 12}, DType::f32, 60), x = random_tensor({3, 5, 12}, DType::f32, 61);
  const Tensor w = random_tensor({12}, DType::f32, 62);
  const AddRmsNormOutput out = add_rms_norm_forward(r, x, w, 1e-6);
  const Tensor sum = add(r, x);
  EXPECT_EQ(out.sum.to_vector<float>(), sum.to_vector<float>());
  EXPECT_EQ(out.normed.y.to_vector<float>(), rms_norm_forward(sum, w, 1e-6).y.to_vector<float>());
  EXPECT_EQ(out.normed.rstd.shape(), (Shape{15}));
  Variable rv(r, true), xv(x, true), wv(w, true);
  const auto [h, y] = add_rms_norm(rv, xv, wv, 1e-6);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(h.value().to_vector<float>(), sum.to_vector<float>());
  EXPECT_EQ(y.value().to_vector<float>(), out.normed.y.to_vector<float>());
  backward(y, random_tensor({3, 5, 12}, DType::f32, 63));
  EXPECT_TRUE(rv.grad().defined() && xv.grad().defined() && wv.grad().defined());
  for (const Fusion choice : {Fusion::separate, Fusion::fused}) {
    AddRmsNormScope scope(choice);
    NoGrad no_grad;
    const auto [h0, y0] = add_rms_norm(rv, xv, wv, 1e-6);
    EXPECT_FALSE(y0.requires_grad());
    EXPECT_EQ(h0.value().to_vector<float>(), sum.to_vector<float>());
    EXPECT_EQ(y0.value().to_vector<float>(), out.normed.y.to_vector<float>());
  }
  expect_error([&] { add_rms_norm_forward(r.narrow(0, 2), x, w, 1e-6); }, {"add_rms_norm: residual", "must match x"});
  // fused takes the one pass at one row and at many, not at the few rows between (kernels/rms_norm/rms_norm.h);
  // either way the values are the add's and the norm's.
  {
    const Tensor r1 = random_tensor({1, 12}, DType::f32, 65), x1 = random_tensor({1, 12}, DType::f32, 66);
    AddRmsNormScope fused(Fusion::fused);
    NoGrad no_grad;
    const auto [h1, y1] = add_rms_norm(Variable(r1), Variable(x1), Variable(w), 1e-6);
    EXPECT_EQ(h1.value().to_vector<float>(), add(r1, x1).to_vector<float>());
    EXPECT_EQ(y1.value().to_vector<float>(), rms_norm_forward(add(r1, x1), w, 1e-6).y.to_vector<float>());
  }
  {
    AddRmsNormScope fused(Fusion::fused);
    EXPECT_TRUE(add_rms_norm_takes_one_pass(1));
    EXPECT_FALSE(add_rms_norm_takes_one_pass(2));
    EXPECT_FALSE(add_rms_norm_takes_one_pass(kAddRmsNormOnePassMinRows - 1));
    EXPECT_TRUE(add_rms_norm_takes_one_pass(kAddRmsNormOnePassMinRows));
    AddRmsNormScope separate(Fusion::separate);
    EXPECT_FALSE(add_rms_norm_takes_one_pass(1));
    EXPECT_FALSE(add_rms_norm_takes_one_pass(kAddRmsNormOnePassMinRows));
  }
  expect_error([&] { add_rms_norm_forward(r, x, w, 0.0); }, {"add_rms_norm: eps"});
  expect_error([&] { add_rms_norm_forward(r, x, random_tensor({11}, DType::f32, 64), 1e-6); },
               {"add_rms_norm: weight", "[12]"});
}
