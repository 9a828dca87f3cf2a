// The divergences (distillation's losses, DSLA's gate cosine) against their formulas, by central differences, and their
// edge cases.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/divergences.h"
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "kernels/divergences/divergences.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(Divergences, MatchTheirFormulas) {
  const Tensor a = random_tensor({3, 4}, DType::f64, 1), b = random_tensor({3, 4}, DType::f64, 2);
  const std::vector<double> x = values(a), y = values(b);
  double mse = 0;
  for (size_t i = 0; i < x.size(); ++i) mse += (x[i] - y[i]) * (x[i] - y[i]) / double(x.size());
  EXPECT_NEAR(mse_to_target(Variable(a), b).value().item(), mse, 1e-12);

  const double T = 2.0;
  double kl = 0, cos = 0;
  for (int r = 0; r < 3; ++r) {
    double zs = 0, zt = 0, uv = 0, uu = 0, vv = 0;
    for (int j = 0; j < 4; ++j) zs += std::exp(x[r * 4 + j] / T), zt += std::exp(y[r * 4 + j] / T);
    for (int j = 0; j < 4; ++j) {
      const double p = std::exp(y[r * 4 + j] / T) / zt, q = std::exp(x[r * 4 + j] / T) / zs;
      kl += p * std::log(p / q) / 3.0;
      uv += x[r * 4 + j] * y[r * 4 + j], uu += x[r * 4 + j] * x[r * 4 + j], vv += y[r * 4 + j] * y[r * 4 + j];
    }
    cos += uv / std::sqrt(uu * vv) / 3.0;
  }
  EXPECT_NEAR(softmax_kl_to_target(Variable(a), b, T).value().item(), T * T * kl, 1e-12);
  EXPECT_NEAR(mean_row_cosine(Variable(a), Variable(b)).value().item(), cos, 1e-12);
  // Identical inputs: no divergence, full similarity.
  EXPECT_NEAR(softmax_kl_to_target(Variable(a), a, 1.5).value().item(), 0.0, 1e-12);
  EXPECT_NEAR(mean_row_cosine(Variable(a), Variable(a)).value().item(), 1.0, 1e-12);
  EXPECT_EQ(mse_to_target(Variable(a.to(DType::f32)), b).value().dtype(), DType::f32);
}

TEST(Divergences, Gradcheck) {
  const Tensor target = random_tensor({2, 3, 5}, DType::f64, 9);
  auto mse = [&](const std::vector<Variable>& in) { return mse_to_target(in[0], target); };
  auto kl = [&](const std::vector<Variable>& in) { return softmax_kl_to_target(in[0], target, 1.7); };
  auto cosine = [](const std::vector<Variable>& in) { return mean_row_cosine(in[0], in[1]); };
  const Tensor x = random_tensor({2, 3, 5}, DType::f64, 3), y = random_tensor({2, 3, 5}, DType::f64, 4);
  for (const auto& [name, r] : {std::pair{"mse", gradcheck(mse, {x})}, std::pair{"kl", gradcheck(kl, {x})},
                                std::pair{"cosine", gradcheck(cosine, {x, y})}})
    EXPECT_TRUE(r.ok) << name << ": " << r.message;
}

TEST(Divergences, BadInputsAreErrors) {
  const Tensor a = random_tensor({3, 4}, DType::f32, 1), b = random_tensor({4, 3}, DType::f32, 2);
  expect_error([&] { mse_to_target(Variable(a), b); }, {"mse_to_target", "one shape"});
  expect_error([&] { softmax_kl_to_target(Variable(a), a, 0.0); }, {"temperature must be > 0"});
  expect_error([&] { mean_row_cosine(Variable(a), Variable(b)); }, {"mean_row_cosine", "one shape"});
}

TEST(Divergences, F32InputsGiveF32ResultsNearTheF64Ones) {
  // The CPU reference accumulates in f64 whatever the input: f32 inputs match f64 inputs to f32 rounding.
  const Tensor s = random_tensor({5, 37}, DType::f64, 11, -4, 4), t = random_tensor({5, 37}, DType::f64, 12, -4, 4);
  const Tensor s32 = s.to(DType::f32).to(DType::f64), t32 = t.to(DType::f32).to(DType::f64);
  const Variable kl32 = softmax_kl_to_target(Variable(s.to(DType::f32)), t.to(DType::f32), 1.3);
  EXPECT_EQ(kl32.value().dtype(), DType::f32);
  EXPECT_NEAR(kl32.value().item(), softmax_kl_to_target(Variable(s32), t32, 1.3).value().item(), 1e-5);
  const RowCosineOutput cos = row_cosine_forward(s.to(DType::f32), t.to(DType::f32));
  EXPECT_EQ(cos.loss.dtype(), DType::f32);
  EXPECT_EQ(cos.sums.shape(), (Shape{5, 3}));
  EXPECT_NEAR(cos.loss.item(), mean_row_cosine(Variable(s32), Variable(t32)).value().item(), 1e-6);
  // A target of another dtype is cast to the input's.
  EXPECT_NEAR(mse_to_target(Variable(s.to(DType::f32)), t).value().item(),
              mse_to_target(Variable(s32), t32).value().item(), 1e-6);
}

TEST(Divergences, KernelInputsAreChecked) {
  const Tensor a = random_tensor({3, 4}, DType::f32, 1), b = random_tensor({3, 4}, DType::f32, 2);
  const Tensor a64 = a.to(DType::f64), one = Tensor::full({}, 1.0, DType::f32);
  expect_error([&] { softmax_kl_forward(a, a64, 1.0); }, {"softmax_kl", "one floating dtype"});
  expect_error([&] { softmax_kl_forward(a, b, -1.0); }, {"softmax_kl", "temperature must be > 0"});
  expect_error(
      [&] {
        mse_forward(Tensor::empty({0, 4}, DType::f32), Tensor::empty({0, 4}, DType::f32));
      },
      {"mse", "empty input"});
  expect_error([&] { row_cosine_forward(a, random_tensor({4, 3}, DType::f32, 3)); }, {"row_cosine", "one shape"});
  expect_error(
      [&] {
        row_cosine_forward(Tensor::from_vector<int64_t>({1, 2}, {2}), Tensor::from_vector<int64_t>({1, 2}, {2}));
      },
      {"row_cosine", "floating"});
  const SoftmaxKlOutput f = softmax_kl_forward(a, b, 1.0);
  EXPECT_EQ(f.lse_student.shape(), (Shape{3}));
  expect_error([&] { softmax_kl_backward(one, a, b, f.lse_teacher.to(DType::f64), f.lse_teacher, 1.0); },
               {"softmax_kl_backward", "lse_student", "should be F32[3]"});
  expect_error(
      [&] { softmax_kl_backward(Tensor::full({2}, 1.0, DType::f32), a, b, f.lse_student, f.lse_teacher, 1.0); },
      {"softmax_kl_backward", "grad_loss must be one floating element"});
  const RowCosineOutput c = row_cosine_forward(a, b);
  expect_error([&] { row_cosine_backward(one, a, b, c.sums.view(Shape{9})); }, {"row_cosine_backward", "sums"});
}

TEST(Divergences, OneRowOfOneElement) {
  // A single token of a one-word vocabulary: the two softmaxes are both 1, no divergence, no gradient.
  Variable x(Tensor::full({1, 1}, 3.0, DType::f64), true);
  const Variable kl = softmax_kl_to_target(x, Tensor::full({1, 1}, -5.0, DType::f64), 2.0);
  EXPECT_NEAR(kl.value().item(), 0.0, 1e-12);
  backward(kl);
  EXPECT_NEAR(x.grad().item(), 0.0, 1e-12);
}
