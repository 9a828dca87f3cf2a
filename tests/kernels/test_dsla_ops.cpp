#include <gtest/gtest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/dsla/dsla.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// Inputs of one DSLA call: q [B, T, H, d], k and v [B, T, Hk, d], log gates in [gate_low, 0].
struct DslaInputs {
  Tensor q, k, v, g1, g2, gamma;
};
DslaInputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t Hk, int64_t d, bool two, DType dt, uint64_t seed,
                       double gate_low = -1.0) {
  DslaInputs in;
  in.q = random_tensor({B, T, H, d}, dt, seed);
  in.k = random_tensor({B, T, Hk, d}, dt, seed + 1);
  in.v = random_tensor({B, T, Hk, d}, dt, seed + 2);
  in.g1 = random_tensor({B, T, H, d}, dt, seed + 3, gate_low, 0.0);
  if (two) in.g2 = random_tensor({B, T, H, d}, dt, seed + 4, gate_low / 8, 0.0);
  in.gamma = random_tensor({H}, dt, seed + 5, 0.1, 0.9);
  return in;
}

// Positions [t0, t0 + len) of a [B, T, heads, d] tensor.
Tensor time_slice(const Tensor& x, int64_t t0, int64_t len) {
  const int64_t B = x.dim(0), T = x.dim(1), row = x.dim(2) * x.dim(3);
  const std::vector<double> all = values(x);
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    out.insert(out.end(), all.begin() + (b * T + t0) * row, all.begin() + (b * T + t0 + len) * row);
  return Tensor::from_vector(out, {B, len, x.dim(2), x.dim(3)}).to(x.dtype());
}
Tensor slice_or_undefined(const Tensor& x, int64_t t0, int64_t len) {
  return x.defined() ? time_slice(x, t0, len) : Tensor();
}

DslaState zero_state(const DslaInputs& in) {
  const Shape s{in.q.dim(0), in.q.dim(2), in.q.dim(3), in.q.dim(3)};
  return {Tensor::zeros(s, in.q.dtype()), in.g2.defined() ? Tensor::zeros(s, in.q.dtype()) : Tensor()};
}

}  // namespace

TEST(DslaOps, ChunkedFormEqualsStepRecurrence) {
  // T = 1, 63, 64, 65, 130: inside one chunk, exactly one, a tail of 1, and two full chunks plus a tail.
  for (int64_t T : {1, 63, 64, 65, 130})
    for (bool two : {false, true})
      for (DType dt : {DType::f64, DType::f32}) {
        const DslaInputs in = make_inputs(2, T, 4, 2, 8, two, dt, 10 + uint64_t(T));
        DslaState state = zero_state(in);
        const DslaForward chunked = dsla_forward(in.q, in.k, in.v, in.g1, in.g2, in.gamma, {}, true);
        const Tensor stepped = dsla_step(in.q, in.k, in.v, in.g1, in.g2, in.gamma, state);
        const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
        const std::string what = "T=" + std::to_string(T) + (two ? " two states " : " one state ") + dtype_name(dt);
        expect_close(chunked.o, stepped, tol, tol, what + " o");
        expect_close(chunked.final_state.s1, state.s1, tol, tol, what + " s1");
        if (two) expect_close(chunked.final_state.s2, state.s2, tol, tol, what + " s2");
      }
}

TEST(DslaOps, StrongGatesDoNotOverflowTheChunkedForm) {
  // Cumulative gates reach about -2000 within a chunk: e^{-b_j} alone would overflow, the exact
  // pairwise ratios do not.
  const DslaInputs in = make_inputs(1, 100, 2, 2, 4, true, DType::f64, 3, -60.0);
  DslaState state = zero_state(in);
  const DslaForward chunked = dsla_forward(in.q, in.k, in.v, in.g1, in.g2, in.gamma, {}, true);
  const Tensor stepped = dsla_step(in.q, in.k, in.v, in.g1, in.g2, in.gamma, state);
  expect_close(chunked.o, stepped, 1e-12, 1e-12, "o");
  expect_close(chunked.final_state.s2, state.s2, 1e-12, 1e-12, "s2");
}

TEST(DslaOps, ForwardContinuesFromItsFinalState) {
  for (bool two : {false, true}) {
    const int64_t T1 = 70, T2 = 30;
    const DslaInputs in = make_inputs(2, T1 + T2, 2, 1, 6, two, DType::f64, 40);
    const DslaForward whole = dsla_forward(in.q, in.k, in.v, in.g1, in.g2, in.gamma, {}, true);
    auto part = [&](int64_t t0, int64_t len, const DslaState& from) {
      return dsla_forward(time_slice(in.q, t0, len), time_slice(in.k, t0, len), time_slice(in.v, t0, len),
                          time_slice(in.g1, t0, len), slice_or_undefined(in.g2, t0, len), in.gamma, from, true);
    };
    const DslaForward first = part(0, T1, {});
    const DslaForward second = part(T1, T2, first.final_state);
    expect_close(first.o, time_slice(whole.o, 0, T1), 1e-12, 1e-12, "first part");
    expect_close(second.o, time_slice(whole.o, T1, T2), 1e-12, 1e-12, "second part");
    expect_close(second.final_state.s1, whole.final_state.s1, 1e-12, 1e-12, "s1");
    if (two) expect_close(second.final_state.s2, whole.final_state.s2, 1e-12, 1e-12, "s2");
  }
}

TEST(DslaOps, StepTokenByTokenEqualsForward) {
  for (bool two : {false, true}) {
    const int64_t T = 9;
    const DslaInputs in = make_inputs(3, T, 4, 1, 5, two, DType::f32, 60);
    const Tensor want = dsla_forward(in.q, in.k, in.v, in.g1, in.g2, in.gamma).o;
    DslaState state = zero_state(in);
    for (int64_t t = 0; t < T; ++t) {
      const Tensor o = dsla_step(time_slice(in.q, t, 1), time_slice(in.k, t, 1), time_slice(in.v, t, 1),
                                 time_slice(in.g1, t, 1), slice_or_undefined(in.g2, t, 1), in.gamma, state);
      expect_close(o, time_slice(want, t, 1), 2e-6, 2e-5, "t=" + std::to_string(t));
    }
  }
}

TEST(DslaOps, GradcheckTwoStatesGqaAcrossAChunkBoundary) {
  // T = 67: a full chunk and a tail of 3; two query heads share one KV head.
  const DslaInputs in = make_inputs(1, 67, 2, 1, 3, true, DType::f64, 80);
  auto f = [](const std::vector<Variable>& x) { return dsla_attention(x[0], x[1], x[2], x[3], x[4], x[5]); };
  const GradcheckResult r = gradcheck(f, {in.q, in.k, in.v, in.g1, in.g2, in.gamma});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(DslaOps, GradcheckOneState) {
  const DslaInputs in = make_inputs(2, 5, 4, 2, 2, false, DType::f64, 90);
  auto f = [](const std::vector<Variable>& x) {
    return dsla_attention(x[0], x[1], x[2], x[3], Variable(), Variable());
  };
  const GradcheckResult r = gradcheck(f, {in.q, in.k, in.v, in.g1});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(DslaOps, BackwardGivesGammaItsMixGradient) {
  // dgamma = sum do . (o1 - o2): the two one-state outputs computed separately.
  const DslaInputs in = make_inputs(2, 20, 2, 2, 4, true, DType::f64, 100);
  const Tensor dout = random_tensor(in.q.shape(), DType::f64, 101);
  const DslaGrads g = dsla_backward(dout, in.q, in.k, in.v, in.g1, in.g2, in.gamma);
  const std::vector<double> o1 = values(dsla_forward(in.q, in.k, in.v, in.g1, Tensor(), Tensor()).o);
  const std::vector<double> o2 = values(dsla_forward(in.q, in.k, in.v, in.g2, Tensor(), Tensor()).o);
  const std::vector<double> dov = values(dout);
  std::vector<double> want(2, 0.0);
  for (size_t i = 0; i < dov.size(); ++i) want[(i / 4) % 2] += dov[i] * (o1[i] - o2[i]);
  expect_close(g.dgamma, want, 1e-12, 1e-12, "dgamma");
}

TEST(DslaOps, FirstGateGetsNoGradient) {
  // g_0 multiplies the zero initial state: its gradient is zero, and with T = 1 all of dg is.
  const DslaInputs in = make_inputs(2, 70, 2, 1, 4, true, DType::f64, 110);
  const DslaGrads g =
      dsla_backward(random_tensor(in.q.shape(), DType::f64, 111), in.q, in.k, in.v, in.g1, in.g2, in.gamma);
  const std::vector<double> dg1 = values(g.dg1), dg2 = values(g.dg2);
  const int64_t row = 2 * 4, per_batch = 70 * row;
  double largest = 0;
  for (double x : dg1) largest = std::max(largest, std::abs(x));
  EXPECT_GT(largest, 1e-3);  // later gates do get gradients
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < row; ++i) {
      EXPECT_NEAR(dg1[size_t(b * per_batch + i)], 0.0, 1e-12);
      EXPECT_NEAR(dg2[size_t(b * per_batch + i)], 0.0, 1e-12);
    }
}

TEST(DslaOps, BadInputsNameTheProblem) {
  const DslaInputs in = make_inputs(1, 4, 4, 2, 8, true, DType::f32, 120);
  auto fwd = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                 const Tensor& gamma, const DslaState& s = {}) { return dsla_forward(q, k, v, g1, g2, gamma, s); };
  expect_error(
      [&] {
        fwd(in.q.view({4, 4, 8}), in.k, in.v, in.g1, in.g2, in.gamma);
      },
      {"dsla_forward", "[B, T, H, d]"});
  expect_error(
      [&] {
        fwd(in.q, random_tensor({1, 4, 2, 4}, DType::f32, 1), in.v, in.g1, in.g2, in.gamma);
      },
      {"k", "Hk"});
  expect_error(
      [&] {
        fwd(in.q, random_tensor({1, 4, 3, 8}, DType::f32, 1), random_tensor({1, 4, 3, 8}, DType::f32, 2), in.g1, in.g2,
            in.gamma);
      },
      {"multiple", "3 key/value heads"});
  expect_error([&] { fwd(in.q, in.k, in.v.view({1, 4, 1, 16}), in.g1, in.g2, in.gamma); }, {"v", "k's shape"});
  expect_error([&] { fwd(in.q, in.k, in.v, in.g1.view({1, 4, 2, 16}), in.g2, in.gamma); }, {"gate", "q's shape"});
  expect_error([&] { fwd(in.q, in.k, in.v, in.g1, in.g2.to(DType::f64), in.gamma); }, {"gate", "F32"});
  expect_error([&] { fwd(in.q, in.k, in.v, in.g1, in.g2, Tensor()); }, {"two states need gamma"});
  expect_error([&] { fwd(in.q, in.k, in.v, in.g1, in.g2, random_tensor({2}, DType::f32, 3)); }, {"gamma", "[4]"});
  expect_error([&] { fwd(in.q.to(DType::f64), in.k, in.v, in.g1, in.g2, in.gamma); }, {"one dtype"});
  expect_error([&] { fwd(in.q.to(DType::bf16), in.k.to(DType::bf16), in.v.to(DType::bf16), in.g1, in.g2, in.gamma); },
               {"F32 or F64"});
  const Tensor s = Tensor::zeros({1, 4, 8, 8}, DType::f32);
  expect_error([&] { fwd(in.q, in.k, in.v, in.g1, in.g2, in.gamma, {s, Tensor()}); }, {"need s2"});
  expect_error([&] { fwd(in.q, in.k, in.v, in.g1, Tensor(), in.gamma, {s, s}); }, {"takes no s2"});
  expect_error(
      [&] {
        fwd(in.q, in.k, in.v, in.g1, in.g2, in.gamma, {s, Tensor::zeros({1, 4, 8, 4}, DType::f32)});
      },
      {"state", "[1, 4, 8, 8]"});
  DslaState empty;
  expect_error([&] { dsla_step(in.q, in.k, in.v, in.g1, in.g2, in.gamma, empty); }, {"dsla_step", "needs s1"});
  expect_error(
      [&] {
        dsla_backward(in.q.view({1, 4, 2, 16}), in.q, in.k, in.v, in.g1, in.g2, in.gamma);
      },
      {"grad_o", "does not match q"});
  // Only the CUDA bf16 kernels keep scores; any given back must have a forward's shape.
  EXPECT_FALSE(dsla_forward(in.q, in.k, in.v, in.g1, in.g2, in.gamma, {}, false, true).scores.defined());
  const Tensor wrong = Tensor::zeros({1, 4, 2, 2, 64, 64}, DType::bf16);
  expect_error([&] { dsla_backward(in.q, in.q, in.k, in.v, in.g1, in.g2, in.gamma, wrong); },
               {"scores", "kept scores", "bf16[1, 4, 2, 1, 64, 64]"});
}
