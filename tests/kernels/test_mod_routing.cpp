// MoD's routing ops (kernels/mod/mod_routing.h): the exact top-k rule, gather/scatter, the routed residual
// and the routing BCE against their formulas, and gradchecks of every differentiable piece.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/mod/mod_routing.h"
#include "kernels/swiglu/swiglu.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

std::vector<int32_t> topk(const std::vector<float>& scores, int64_t B, int64_t k) {
  return topk_per_sequence(Tensor::from_vector(scores, {B, int64_t(scores.size()) / B}), k).to_vector<int32_t>();
}

// The rule written out: rank every token by (score desc, index asc), keep the first k, sort them.
std::vector<int32_t> brute_topk(const std::vector<float>& scores, int64_t B, int64_t k) {
  const int64_t S = int64_t(scores.size()) / B;
  std::vector<int32_t> out;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> chosen;
    for (int64_t i = 0; i < S; ++i) {
      int64_t above = 0;
      for (int64_t j = 0; j < S; ++j) {
        const float a = scores[size_t(b * S + j)], v = scores[size_t(b * S + i)];
        above += a > v || (a == v && j < i);
      }
      if (above < k) chosen.push_back(int32_t(i));
    }
    out.insert(out.end(), chosen.begin(), chosen.end());
  }
  return out;
}

// Scores with many ties: multiples of 1/4 in [-2, 2].
std::vector<float> tied_scores(int64_t n, uint64_t seed) {
  const std::vector<double> u = values(random_tensor({n}, DType::f64, seed, -2, 2));
  std::vector<float> s(static_cast<size_t>(n));
  for (size_t i = 0; i < s.size(); ++i) s[i] = float(std::round(u[i] * 4) / 4);
  return s;
}

}  // namespace

TEST(ModTopk, PaperExampleKeepsOriginalOrder) {
  // Positions 2 and 5 (1-based) of the scores .1 .9 .2 .3 .8 .4 .05 .6 enter a block of capacity 2.
  EXPECT_EQ(topk({.1f, .9f, .2f, .3f, .8f, .4f, .05f, .6f}, 1, 2), (std::vector<int32_t>{1, 4}));
}

TEST(ModTopk, TiesGoToTheLowerIndexAndIndicesAscend) {
  EXPECT_EQ(topk(std::vector<float>(7, 0.5f), 1, 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(topk({1, 3, 3, 2, 3}, 1, 2), (std::vector<int32_t>{1, 2}));
  // -0 ties +0; a NaN ranks above every number.
  EXPECT_EQ(topk({0.0f, -0.0f, 0.0f}, 1, 2), (std::vector<int32_t>{0, 1}));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(topk({inf, nan, 1, nan}, 1, 2), (std::vector<int32_t>{1, 3}));
}

TEST(ModTopk, PerSequenceMatchesTheRuleOnAwkwardShapes) {
  // B = 3, S not a multiple of 8 or 64, k = 1 and k = S among them: each row ranks on its own.
  for (const auto& [S, k] : std::vector<std::pair<int64_t, int64_t>>{{13, 1}, {13, 13}, {67, 9}, {130, 17}, {5, 4}}) {
    const std::vector<float> s = tied_scores(3 * S, uint64_t(S * 31 + k));
    EXPECT_EQ(topk(s, 3, k), brute_topk(s, 3, k)) << "S " << S << " k " << k;
  }
  // k = S is every index in order.
  std::vector<int32_t> all(11);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(topk(tied_scores(11, 3), 1, 11), all);
}

TEST(ModTopk, BadArgumentsAreNamed) {
  const Tensor s = Tensor::zeros({2, 5}, DType::f32);
  expect_error([&] { topk_per_sequence(s, 0); }, {"k must be in [1, S = 5]", "got 0"});
  expect_error([&] { topk_per_sequence(s, 6); }, {"k must be in [1, S = 5]"});
  expect_error([&] { topk_per_sequence(Tensor::zeros({10}, DType::f32), 1); }, {"F32 [B, S]"});
  expect_error([&] { topk_per_sequence(Tensor::zeros({2, 5}, DType::f64), 1); }, {"F32 [B, S]"});
}

TEST(ModGather, RoundTripAndErrors) {
  const Tensor x = random_tensor({3, 9, 2, 3}, DType::f32, 1);
  const Tensor idx = topk_per_sequence(random_tensor({3, 9}, DType::f32, 2), 4);
  const Tensor rows = gather_rows(x, idx);
  ASSERT_EQ(rows.shape(), Shape({3, 4, 2, 3}));
  // gather(scatter(rows)) is rows; scatter(gather(x)) is x at the chosen rows and 0 elsewhere.
  EXPECT_EQ(values(gather_rows(scatter_rows(rows, idx, 9), idx)), values(rows));
  const std::vector<double> back = values(scatter_rows(rows, idx, 9)), xs = values(x);
  const std::vector<int32_t> id = idx.to_vector<int32_t>();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t s = 0; s < 9; ++s) {
      const bool chosen = std::count(id.begin() + b * 4, id.begin() + b * 4 + 4, int32_t(s)) > 0;
      for (int64_t c = 0; c < 6; ++c) {
        const size_t i = size_t((b * 9 + s) * 6 + c);
        EXPECT_EQ(back[i], chosen ? xs[i] : 0.0);
      }
    }
  expect_error(
      [&] {
        gather_rows(x, Tensor::from_vector(std::vector<int32_t>{0, 9, 1}, {3, 1}));
      },
      {"index 9", "outside the sequence [0, 9)"});
  expect_error([&] { gather_rows(x, Tensor::zeros({2, 1}, DType::i32)); }, {"idx must be I32 [3, k]"});
  expect_error([&] { gather_rows(x, Tensor::zeros({3, 1}, DType::i64)); }, {"idx must be I32"});
}

TEST(ModRoutedMix, AddsTheWeightedDeltaAtTheChosenRowsOnly) {
  const int64_t B = 3, S = 7, k = 3, d = 5;
  for (const RouteWeight weight : {RouteWeight::identity, RouteWeight::sigmoid, RouteWeight::one}) {
    const Tensor x = random_tensor({B, S, d}, DType::f64, 3), y = random_tensor({B, k, d}, DType::f64, 4);
    const Tensor r = random_tensor({B, S}, DType::f64, 5, -3, 3);
    const Tensor idx = topk_per_sequence(r.to(DType::f32), k);
    const std::vector<double> xs = values(x), ys = values(y), rs = values(r);
    const std::vector<int32_t> id = idx.to_vector<int32_t>();
    std::vector<double> want = xs;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t i = b * S + id[size_t(b * k + j)];
        const double g = weight == RouteWeight::one       ? 1.0
                         : weight == RouteWeight::sigmoid ? 1.0 / (1.0 + std::exp(-rs[size_t(i)]))
                                                          : rs[size_t(i)];
        for (int64_t c = 0; c < d; ++c)
          want[size_t(i * d + c)] =
              xs[size_t(i * d + c)] + g * (ys[size_t((b * k + j) * d + c)] - xs[size_t(i * d + c)]);
      }
    expect_close(routed_mix_forward(x, y, r, idx, weight), want, 1e-12, 1e-12);
  }
}

TEST(ModRoutedMix, WeightOneGivesTheBlockOutputExactly) {
  const Tensor x = random_tensor({2, 6, 4}, DType::f32, 6), y = random_tensor({2, 6, 4}, DType::f32, 7);
  std::vector<int32_t> all{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  const Tensor idx = Tensor::from_vector(all, {2, 6});
  EXPECT_EQ(
      routed_mix_forward(x, y, Tensor::full({2, 6}, 1.0, DType::f32), idx, RouteWeight::identity).to_vector<float>(),
      y.to_vector<float>());
  EXPECT_EQ(routed_mix_forward(x, y, Tensor::zeros({2, 6}, DType::f32), idx, RouteWeight::identity).to_vector<float>(),
            x.to_vector<float>());
  expect_error(
      [&] {
        routed_mix_forward(x, y, Tensor::zeros({2, 6}, DType::f64), idx, RouteWeight::identity);
      },
      {"router logits r must be F32[2, 6]"});
  expect_error([&] { routed_mix_forward(x, y.narrow(0, 1), Tensor(), idx, RouteWeight::one); },
               {"y ", "must be F32[2, 6, 4]"});
}

TEST(ModRoutedMix, Gradcheck) {
  const Tensor idx = Tensor::from_vector(std::vector<int32_t>{0, 3, 4, 1, 2, 5, 2, 4, 5}, {3, 3});
  for (const RouteWeight weight : {RouteWeight::identity, RouteWeight::sigmoid, RouteWeight::one}) {
    const auto f = [&](const std::vector<Variable>& in) { return routed_mix(in[0], in[1], in[2], idx, weight); };
    GradcheckResult r = gradcheck(f, {random_tensor({3, 6, 5}, DType::f64, 8), random_tensor({3, 3, 5}, DType::f64, 9),
                                      random_tensor({3, 6}, DType::f64, 10, -2, 2)});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(ModRouting, RouterGradcheckThroughGatherBlockAndMix) {
  // x -> r = x w (the router), top-k of r, a "block" on the gathered rows (a SiLU of a projection),
  // the routed residual: the router's gradient arrives only through g(r) * delta.
  const Tensor w_block = random_tensor({5, 5}, DType::f64, 11);
  for (const RouteWeight weight : {RouteWeight::identity, RouteWeight::sigmoid}) {
    const auto f = [&](const std::vector<Variable>& in) {
      const Variable& x = in[0];
      const Variable r = reshape(linear_wide(x, in[1]), {3, 7});
      const Tensor idx = topk_per_sequence(r.value().to(DType::f32), 2);
      const Variable chosen = gather_rows(x, idx);
      const Variable y = add(chosen, silu(linear(chosen, in[2])));
      return routed_mix(x, y, r, idx, weight);
    };
    GradcheckResult r =
        gradcheck(f, {random_tensor({3, 7, 5}, DType::f64, 12), random_tensor({1, 5}, DType::f64, 13), w_block});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(ModRouting, RouterGetsNoGradientWhereTheDeltaIsZero) {
  Variable x(random_tensor({2, 5, 4}, DType::f32, 14), true), w(random_tensor({1, 4}, DType::f32, 15), true);
  const Variable r = reshape(linear_wide(x, w), {2, 5});
  const Tensor idx = topk_per_sequence(r.value(), 2);
  const Variable out = routed_mix(x, gather_rows(x, idx), r, idx, RouteWeight::identity);  // block = identity
  backward(out, random_tensor({2, 5, 4}, DType::f32, 16));
  for (double g : values(w.grad())) EXPECT_EQ(g, 0.0);
}

TEST(ModRoutingBce, FormulaAndGradcheck) {
  const Tensor l = random_tensor({3, 7}, DType::f64, 17, -30, 30);
  const Tensor t = scatter_rows(Tensor::full({3, 2}, 1.0, DType::f64),
                                Tensor::from_vector(std::vector<int32_t>{0, 6, 2, 3, 1, 5}, {3, 2}), 7);
  const std::vector<double> ls = values(l), ts = values(t);
  double want = 0;
  for (size_t i = 0; i < ls.size(); ++i) {
    const double p = 1.0 / (1.0 + std::exp(-ls[i]));
    want -= ts[i] * std::log(p) + (1 - ts[i]) * std::log1p(-p);
  }
  EXPECT_NEAR(routing_bce_forward(l, t).item(), want / double(ls.size()), 1e-9);
  GradcheckResult r = gradcheck([&](const std::vector<Variable>& in) { return routing_bce(in[0], t); },
                                {random_tensor({3, 7}, DType::f64, 18, -4, 4)});
  EXPECT_TRUE(r.ok) << r.message;
  expect_error([&] { routing_bce_forward(l, t.to(DType::f32)); }, {"targets", "must match logits"});
}

TEST(ModHeads, SiluAndWideLinearGradcheck) {
  GradcheckResult s = gradcheck([](const std::vector<Variable>& in) { return silu(in[0]); },
                                {random_tensor({4, 9}, DType::f64, 19, -6, 6)});
  EXPECT_TRUE(s.ok) << s.message;
  const std::vector<double> x = values(random_tensor({300}, DType::f64, 20, -20, 20));
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] / (1 + std::exp(-x[i]));
  expect_close(silu_forward(Tensor::from_vector(x, {300})), want, 1e-12, 1e-12);
  GradcheckResult w = gradcheck([](const std::vector<Variable>& in) { return linear_wide(in[0], in[1]); },
                                {random_tensor({2, 3, 6}, DType::f64, 21), random_tensor({1, 6}, DType::f64, 22)});
  EXPECT_TRUE(w.ok) << w.message;
}
