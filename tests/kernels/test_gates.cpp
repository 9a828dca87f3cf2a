// DSLA's gates (kernels/dsla/gates.h): the log forget gate g = scale * logsigmoid(z + b) and the mixing
// weight sigmoid(c) repeated over heads, against plain double formulas, with gradchecks.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/dsla/gates.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(LogSigmoidGate, MatchesTheFormulaFarIntoBothTails) {
  // Enough elements for the parallel loops; z spans the saturated regions on both sides.
  const int64_t rows = 2731, n = 97;
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor z = random_tensor({rows, n}, dt, 1, -60, 60), bias = random_tensor({n}, dt, 2, -3, 3);
    const Tensor dg = random_tensor({rows, n}, dt, 3);
    const std::vector<double> zv = values(z), bv = values(bias), dv = values(dg);
    std::vector<double> g(zv.size()), du(zv.size());
    for (size_t i = 0; i < zv.size(); ++i) {
      const double u = zv[i] + bv[i % n];
      g[i] = -std::log1p(std::exp(-u)) / 16;                                                     // log(sigmoid(u)) / 16
      du[i] = dv[i] / 16 * (u > 0 ? std::exp(-u) / (1 + std::exp(-u)) : 1 / (1 + std::exp(u)));  // sigmoid(-u) / 16
    }
    const double tol = dt == DType::f32 ? 1e-6 : 1e-13;
    const Tensor got = log_sigmoid_gate_forward(z, bias, 1.0 / 16);
    EXPECT_EQ(got.dtype(), dt);
    expect_close(got, g, tol, tol, "g");
    expect_close(log_sigmoid_gate_backward(dg, got, 1.0 / 16), du, tol, 10 * tol, "dg/du");
  }
}

TEST(LogSigmoidGate, GradcheckOfTheProjectionAndTheBias) {
  const auto f = [](const std::vector<Variable>& in) { return log_sigmoid_gate(in[0], in[1], 1.0 / 16); };
  GradcheckResult r = gradcheck(f, {random_tensor({2, 5, 6}, DType::f64, 4, -5, 5), random_tensor({6}, DType::f64, 5)});
  EXPECT_TRUE(r.ok) << r.message;
  // Through a projection, as the layer uses it.
  const auto projected = [](const std::vector<Variable>& in) {
    return log_sigmoid_gate(linear(in[0], in[1]), in[2], 1.0 / 16);
  };
  r = gradcheck(projected, {random_tensor({3, 4}, DType::f64, 6), random_tensor({5, 4}, DType::f64, 7),
                            random_tensor({5}, DType::f64, 8)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(LogSigmoidGate, F32GradientsAgreeWithF64) {
  const Tensor z = random_tensor({33, 65}, DType::f64, 9, -8, 8), b = random_tensor({65}, DType::f64, 10);
  const Tensor dg = random_tensor({33, 65}, DType::f64, 11);
  Variable z64(z, true), b64(b, true), z32(z.to(DType::f32), true), b32(b.to(DType::f32), true);
  backward(log_sigmoid_gate(z64, b64, 0.25), dg);
  backward(log_sigmoid_gate(z32, b32, 0.25), dg.to(DType::f32));
  expect_close(z32.grad(), z64.grad(), 1e-6, 1e-5, "dz");
  expect_close(b32.grad(), b64.grad(), 1e-5, 1e-5, "dbias");
}

TEST(SigmoidExpand, RepeatsEachLogitOverItsHeadsAndSumsTheirGradients) {
  const Tensor c = Tensor::from_vector(std::vector<double>{-2.0, 0.5}, {2});
  const Tensor y = sigmoid_expand_forward(c, 6);
  const double s0 = 1 / (1 + std::exp(2.0)), s1 = 1 / (1 + std::exp(-0.5));
  expect_close(y, {s0, s0, s0, s1, s1, s1}, 1e-15, 1e-15, "y");
  const Tensor dy = Tensor::from_vector(std::vector<double>{1, 2, 3, -1, 0, 4}, {6});
  expect_close(sigmoid_expand_backward(dy, y, 2), {6 * s0 * (1 - s0), 3 * s1 * (1 - s1)}, 1e-15, 1e-14, "dc");
  for (int64_t m : {1, 4}) {
    const auto f = [](const std::vector<Variable>& in) { return sigmoid_expand(in[0], 8); };
    const GradcheckResult r = gradcheck(f, {random_tensor({m}, DType::f64, 12 + uint64_t(m), -3, 3)});
    EXPECT_TRUE(r.ok) << "m = " << m << ": " << r.message;
  }
}

TEST(Gates, BadInputsAreErrors) {
  const Tensor z = Tensor::zeros({3, 4}, DType::f32);
  expect_error([&] { log_sigmoid_gate_forward(z, Tensor::zeros({3}, DType::f32), 1); }, {"bias", "must be [n]"});
  expect_error([&] { log_sigmoid_gate_forward(z, Tensor::zeros({4}, DType::f64), 1); }, {"bias must be F32"});
  expect_error([&] { log_sigmoid_gate_backward(z, Tensor::zeros({4, 3}, DType::f32), 1); }, {"one shape and dtype"});
  expect_error([&] { sigmoid_expand_forward(Tensor::zeros({3}, DType::f32), 4); }, {"m dividing n = 4"});
  expect_error([&] { sigmoid_expand_backward(Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f32), 3); },
               {"multiple of m = 3"});
}
