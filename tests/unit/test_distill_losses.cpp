// The distillation losses against their formulas, by central differences, and their edge cases.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/distill_losses.h"
#include "autograd/gradcheck.h"
#include "tests/unit/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(DistillLosses, MatchTheirFormulas) {
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

TEST(DistillLosses, Gradcheck) {
  const Tensor target = random_tensor({2, 3, 5}, DType::f64, 9);
  auto mse = [&](const std::vector<Variable>& in) { return mse_to_target(in[0], target); };
  auto kl = [&](const std::vector<Variable>& in) { return softmax_kl_to_target(in[0], target, 1.7); };
  auto cosine = [](const std::vector<Variable>& in) { return mean_row_cosine(in[0], in[1]); };
  const Tensor x = random_tensor({2, 3, 5}, DType::f64, 3), y = random_tensor({2, 3, 5}, DType::f64, 4);
  for (const auto& [name, r] : {std::pair{"mse", gradcheck(mse, {x})}, std::pair{"kl", gradcheck(kl, {x})},
                                std::pair{"cosine", gradcheck(cosine, {x, y})}})
    EXPECT_TRUE(r.ok) << name << ": " << r.message;
}

TEST(DistillLosses, BadInputsAreErrors) {
  const Tensor a = random_tensor({3, 4}, DType::f32, 1), b = random_tensor({4, 3}, DType::f32, 2);
  expect_error([&] { mse_to_target(Variable(a), b); }, {"mse_to_target", "one shape"});
  expect_error([&] { softmax_kl_to_target(Variable(a), a, 0.0); }, {"temperature must be > 0"});
  expect_error([&] { mean_row_cosine(Variable(a), Variable(b)); }, {"mean_row_cosine", "one shape"});
}
