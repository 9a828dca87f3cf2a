#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/swiglu/swiglu.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(Swiglu, MatchesNaiveFormula) {
  // Enough elements for the multi-threaded path, with a ragged last chunk; gates span the saturated
  // regions.
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor gate = random_tensor({300001}, dt, 1, -30, 30), up = random_tensor({300001}, dt, 2);
    Tensor dy = random_tensor({300001}, dt, 3);
    const std::vector<double> g = values(gate), u = values(up), d = values(dy);
    std::vector<double> y(g.size()), dg(g.size()), du(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double sig = 1.0 / (1.0 + std::exp(-g[i]));
      y[i] = g[i] * sig * u[i];
      du[i] = d[i] * g[i] * sig;
      dg[i] = d[i] * u[i] * (sig + g[i] * sig * (1.0 - sig));  // product rule on g * sigmoid(g)
    }
    const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
    expect_close(swiglu_forward(gate, up), y, tol, tol, "y");
    SwigluGrads grads = swiglu_backward(dy, gate, up);
    expect_close(grads.dgate, dg, tol, tol, "dgate");
    expect_close(grads.dup, du, tol, tol, "dup");
  }
}

TEST(Swiglu, Gradcheck) {
  GradcheckResult r = gradcheck([](const std::vector<Variable>& in) { return swiglu(in[0], in[1]); },
                                {random_tensor({3, 7}, DType::f64, 4, -4, 4), random_tensor({3, 7}, DType::f64, 5)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Swiglu, F32AgreesWithF64) {
  Tensor g = random_tensor({33, 65}, DType::f64, 6, -6, 6), u = random_tensor({33, 65}, DType::f64, 7);
  Tensor dy = random_tensor({33, 65}, DType::f64, 8);
  Variable g64(g, true), u64(u, true), g32(g.to(DType::f32), true), u32(u.to(DType::f32), true);
  Variable y64 = swiglu(g64, u64), y32 = swiglu(g32, u32);
  expect_close(y32.value(), y64.value(), 1e-5, 1e-5);
  backward(y64, dy);
  backward(y32, dy.to(DType::f32));
  expect_close(g32.grad(), g64.grad(), 1e-5, 1e-5);
  expect_close(u32.grad(), u64.grad(), 1e-5, 1e-5);
}

TEST(Swiglu, BadInputsAreErrors) {
  expect_error(
      [&] {
        swiglu(Variable(random_tensor({3, 4}, DType::f32, 1)), Variable(random_tensor({4, 3}, DType::f32, 2)));
      },
      {"up", "does not match gate"});
  expect_error(
      [&] { swiglu(Variable(random_tensor({3}, DType::f32, 1)), Variable(random_tensor({3}, DType::f64, 2))); },
      {"does not match"});
  expect_error([&] { swiglu_forward(Tensor::zeros({3}, DType::bf16), Tensor::zeros({3}, DType::bf16)); },
               {"F32 or F64"});
}
