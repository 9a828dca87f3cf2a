#include <gtest/gtest.h>

#include <cmath>

#include "kernels/adamw/adamw.h"
#include "optim/grad_clip.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(AdamW, MatchesNaiveOverSeveralSteps) {
  const int64_t n = 300007;  // parallel path plus an odd tail
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor p = random_tensor({n}, dt, 1), m = Tensor::zeros({n}, dt), v = Tensor::zeros({n}, dt);
    std::vector<double> pw = values(p), mw(size_t(n), 0.0), vw(size_t(n), 0.0);
    AdamWStep cfg{3e-3, 0.9, 0.95, 1e-8, 0.1, 1};
    for (int64_t step = 1; step <= 3; ++step) {
      cfg.step = step;
      Tensor g = random_tensor({n}, dt, 10 + uint64_t(step));
      const std::vector<double> gw = values(g);
      for (int64_t i = 0; i < n; ++i) {
        pw[i] -= cfg.lr * cfg.weight_decay * pw[i];
        mw[i] = cfg.beta1 * mw[i] + (1 - cfg.beta1) * gw[i];
        vw[i] = cfg.beta2 * vw[i] + (1 - cfg.beta2) * gw[i] * gw[i];
        const double mhat = mw[i] / (1 - std::pow(cfg.beta1, double(step)));
        const double vhat = vw[i] / (1 - std::pow(cfg.beta2, double(step)));
        pw[i] -= cfg.lr * mhat / (std::sqrt(vhat) + cfg.eps);
      }
      adamw_update(p, g, m, v, cfg);
    }
    const double tol = dt == DType::f32 ? 1e-6 : 1e-14;
    expect_close(p, pw, tol, tol, "param");
    expect_close(m, mw, tol, tol, "m");
    expect_close(v, vw, tol, tol, "v");
  }
}

TEST(AdamW, FirstStepMovesByLearningRateAndSubRangesAreIndependent) {
  // At step 1 the bias-corrected update is lr * g / (|g| + eps): a sign step. A no-decay sub-range
  // (narrow view) updated separately keeps its own weight-decay setting.
  Tensor p = Tensor::full({8}, 2.0, DType::f32), m = Tensor::zeros({8}, DType::f32), v = Tensor::zeros({8}, DType::f32);
  Tensor g = random_tensor({8}, DType::f32, 3);
  Tensor p_head = p.narrow(0, 4), m_head = m.narrow(0, 4), v_head = v.narrow(0, 4);
  Tensor p_tail = p.narrow(4, 4), m_tail = m.narrow(4, 4), v_tail = v.narrow(4, 4);
  adamw_update(p_head, g.narrow(0, 4), m_head, v_head, {0.01, 0.9, 0.95, 1e-8, 0.5, 1});
  adamw_update(p_tail, g.narrow(4, 4), m_tail, v_tail, {0.01, 0.9, 0.95, 1e-8, 0.0, 1});
  const std::vector<double> gv = values(g);
  std::vector<double> want(8);
  for (int i = 0; i < 8; ++i) want[i] = 2.0 * (i < 4 ? 1 - 0.01 * 0.5 : 1.0) - 0.01 * (gv[i] > 0 ? 1 : -1);
  expect_close(p, want, 1e-6, 0);
}

// grad_scale (the clip coefficient) is the same update as gradients scaled beforehand, bit for bit.
TEST(AdamW, GradScaleEqualsScaledGradients) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor g = random_tensor({1000}, dt, 21), p0 = random_tensor({1000}, dt, 22);
    const Tensor m0 = random_tensor({1000}, dt, 23, -1e-3, 1e-3), v0 = random_tensor({1000}, dt, 24, 0, 1e-4);
    const double s = 0.37;
    Tensor p1 = p0.clone(), m1 = m0.clone(), v1 = v0.clone(), p2 = p0.clone(), m2 = m0.clone(), v2 = v0.clone();
    Tensor scaled = g.clone();
    if (dt == DType::f32) {
      float* x = scaled.data<float>();
      for (int64_t i = 0; i < 1000; ++i) x[i] = x[i] * float(s);
    } else {
      double* x = scaled.data<double>();
      for (int64_t i = 0; i < 1000; ++i) x[i] = x[i] * s;
    }
    adamw_update(p1, g, m1, v1, AdamWStep{1e-3, 0.9, 0.95, 1e-8, 0.1, 3, s});
    adamw_update(p2, scaled, m2, v2, AdamWStep{1e-3, 0.9, 0.95, 1e-8, 0.1, 3});
    EXPECT_EQ(values(p1), values(p2)) << dtype_name(dt);
    EXPECT_EQ(values(m1), values(m2)) << dtype_name(dt);
    EXPECT_EQ(values(v1), values(v2)) << dtype_name(dt);
  }
}

TEST(AdamW, BadArgumentsAreErrors) {
  Tensor p = random_tensor({4}, DType::f32, 1), g = random_tensor({4}, DType::f32, 2);
  Tensor m = Tensor::zeros({4}, DType::f32), v = Tensor::zeros({4}, DType::f32);
  Tensor short_v = Tensor::zeros({3}, DType::f32);
  expect_error([&] { adamw_update(p, g, m, short_v, {}); }, {"does not match param"});
  expect_error([&] { adamw_update(p, g.to(DType::f64), m, v, {}); }, {"does not match param"});
  expect_error([&] { adamw_update(p, g, m, v, {1e-3, 1.0, 0.95, 1e-8, 0.0, 1}); }, {"beta1"});
  expect_error([&] { adamw_update(p, g, m, v, {1e-3, 0.9, 0.95, 1e-8, 0.0, 0}); }, {"step"});
  expect_error([&] { adamw_update(p, g, m, v, {-1.0, 0.9, 0.95, 1e-8, 0.0, 1}); }, {"lr"});
  expect_error([&] { adamw_update(p, g, m, v, {1e-3, 0.9, 0.95, 0.0, 0.0, 1}); }, {"eps"});
  expect_error([&] { adamw_update(p, g, m, v, {1e-3, 0.9, 0.95, 1e-8, 0.0, 1, 0.0}); }, {"grad_scale"});
}

// The clip coefficient: max_norm / norm above the limit, 1 at or below it, when disabled, or for a
// non-finite norm (which the training step reports itself).
TEST(GradClip, CoefficientScalesTheNormDownToTheLimit) {
  EXPECT_NEAR(clip_coefficient(4.0, 1.0) * 4.0, 1.0, 1e-6);
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(1.0, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(10.0, 0.0), 1.0);
  EXPECT_EQ(clip_coefficient(INFINITY, 1.0), 1.0);
  const Tensor g = Tensor::from_vector<float>({3, 4}, {2});
  EXPECT_NEAR(grad_norm(g), 5.0, 1e-6);
}
