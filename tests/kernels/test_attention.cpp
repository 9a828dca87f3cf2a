#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/attention/attention.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct NaiveAttention {
  std::vector<double> o, lse, dq, dk, dv;
};

// Causal GQA attention and its gradients by plain loops in double, one (batch, query head, t) at a time.
NaiveAttention naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, double scale) {
  const int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), Hk = k.dim(2), d = q.dim(3), G = Hq / Hk;
  const std::vector<double> qv = values(q), kv = values(k), vv = values(v), dov = values(dout);
  auto Q = [&](int64_t b, int64_t t, int64_t h, int64_t c) { return ((b * T + t) * Hq + h) * d + c; };
  auto K = [&](int64_t b, int64_t t, int64_t h, int64_t c) { return ((b * T + t) * Hk + h) * d + c; };
  NaiveAttention out{std::vector<double>(qv.size()), std::vector<double>(size_t(B * Hq * T)),
                     std::vector<double>(qv.size()), std::vector<double>(kv.size()), std::vector<double>(kv.size())};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / G;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(size_t(t + 1)), p(size_t(t + 1)), dp(size_t(t + 1));
        double max = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += qv[Q(b, t, h, c)] * kv[K(b, j, hk, c)];
          s[j] = scale * dot;
          max = std::max(max, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[j] - max);
        out.lse[(b * Hq + h) * T + t] = max + std::log(sum);
        for (int64_t j = 0; j <= t; ++j) p[j] = std::exp(s[j] - max) / sum;
        for (int64_t c = 0; c < d; ++c)
          for (int64_t j = 0; j <= t; ++j) out.o[Q(b, t, h, c)] += p[j] * vv[K(b, j, hk, c)];
        // Softmax backward: ds_j = p_j (dp_j - sum_i p_i dp_i), dp_j = do . v_j.
        double row = 0;
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t c = 0; c < d; ++c) dp[j] += dov[Q(b, t, h, c)] * vv[K(b, j, hk, c)];
          row += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double ds = p[j] * (dp[j] - row);
          for (int64_t c = 0; c < d; ++c) {
            out.dq[Q(b, t, h, c)] += scale * ds * kv[K(b, j, hk, c)];
            out.dk[K(b, j, hk, c)] += scale * ds * qv[Q(b, t, h, c)];
            out.dv[K(b, j, hk, c)] += p[j] * dov[Q(b, t, h, c)];
          }
        }
      }
    }
  return out;
}

}  // namespace

TEST(Attention, MatchesNaiveForEveryGroupSize) {
  // T = 150 crosses the kernel's 64-row blocks and leaves a ragged last block.
  const int64_t B = 2, T = 150, d = 8;
  for (auto [Hq, Hk] : std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {4, 2}, {6, 2}, {4, 1}, {8, 1}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor q = random_tensor({B, T, Hq, d}, dt, 1, -2, 2), k = random_tensor({B, T, Hk, d}, dt, 2, -2, 2);
      Tensor v = random_tensor({B, T, Hk, d}, dt, 3), dout = random_tensor({B, T, Hq, d}, dt, 4);
      const double scale = 1.0 / std::sqrt(double(d));
      const NaiveAttention want = naive_attention(q, k, v, dout, scale);
      AttentionOutput out = attention_forward(q, k, v, scale);
      AttentionGrads grads = attention_backward(dout, q, k, v, out.o, out.lse, scale);
      const double tol = dt == DType::f32 ? 3e-5 : 1e-11;
      const std::string what = "G=" + std::to_string(Hq / Hk) + " " + dtype_name(dt);
      expect_close(out.o, want.o, tol, tol, what + " o");
      expect_close(out.lse, want.lse, tol, tol, what + " lse");
      EXPECT_EQ(out.lse.shape(), Shape({B, Hq, T}));
      expect_close(grads.dq, want.dq, tol, tol, what + " dq");
      expect_close(grads.dk, want.dk, 4 * tol, tol, what + " dk");
      expect_close(grads.dv, want.dv, 4 * tol, tol, what + " dv");
    }
  }
}

TEST(Attention, GradcheckGroupOfThreeAndSingleHead) {
  auto f = [](const std::vector<Variable>& in) { return attention(in[0], in[1], in[2], 0.4); };
  GradcheckResult g3 =
      gradcheck(f, {random_tensor({2, 7, 6, 4}, DType::f64, 5), random_tensor({2, 7, 2, 4}, DType::f64, 6),
                    random_tensor({2, 7, 2, 4}, DType::f64, 7)});
  EXPECT_TRUE(g3.ok) << g3.message;
  // Odd head dim, and T = 67 so the second row block has a tail of 3.
  GradcheckResult g1 =
      gradcheck(f, {random_tensor({1, 67, 1, 3}, DType::f64, 8), random_tensor({1, 67, 1, 3}, DType::f64, 9),
                    random_tensor({1, 67, 1, 3}, DType::f64, 10)});
  EXPECT_TRUE(g1.ok) << g1.message;
}

TEST(Attention, F32AgreesWithF64) {
  Tensor q = random_tensor({2, 40, 4, 16}, DType::f64, 11), k = random_tensor({2, 40, 2, 16}, DType::f64, 12);
  Tensor v = random_tensor({2, 40, 2, 16}, DType::f64, 13), g = random_tensor({2, 40, 4, 16}, DType::f64, 14);
  Variable q64(q, true), k64(k, true), v64(v, true);
  Variable q32(q.to(DType::f32), true), k32(k.to(DType::f32), true), v32(v.to(DType::f32), true);
  Variable o64 = attention(q64, k64, v64, 0.25), o32 = attention(q32, k32, v32, 0.25);
  expect_close(o32.value(), o64.value(), 1e-5, 1e-5);
  backward(o64, g);
  backward(o32, g.to(DType::f32));
  expect_close(q32.grad(), q64.grad(), 1e-5, 1e-4);
  expect_close(k32.grad(), k64.grad(), 1e-5, 1e-4);
  expect_close(v32.grad(), v64.grad(), 1e-5, 1e-4);
}

TEST(Attention, BadInputsAreErrors) {
  auto t = [](Shape s) { return Variable(random_tensor(s, DType::f32, 1)); };
  expect_error(
      [&] {
        attention(t({1, 4, 6, 8}), t({1, 4, 4, 8}), t({1, 4, 4, 8}), 0.3);
      },
      {"Hq = 6", "multiple of KV heads Hk = 4"});
  expect_error([&] { attention(t({1, 4, 4, 8}), t({1, 5, 2, 8}), t({1, 5, 2, 8}), 0.3); }, {"sequence length"});
  expect_error([&] { attention(t({1, 4, 4, 8}), t({1, 4, 2, 8}), t({1, 4, 2, 4}), 0.3); }, {"differ in shape"});
  expect_error([&] { attention(t({4, 4, 8}), t({4, 2, 8}), t({4, 2, 8}), 0.3); }, {"[B, T, H, d]"});
  expect_error(
      [&] {
        attention(t({1, 4, 2, 8}), t({1, 4, 2, 8}), Variable(random_tensor({1, 4, 2, 8}, DType::f64, 2)), 0.3);
      },
      {"dtypes differ"});
  Tensor q = random_tensor({1, 4, 2, 8}, DType::f32, 3);
  AttentionOutput out = attention_forward(q, q, q, 0.3);
  expect_error([&] { attention_backward(q, q, q, q, out.o, out.lse.view({1, 4, 2}), 0.3); }, {"lse", "[1, 2, 4]"});
}
