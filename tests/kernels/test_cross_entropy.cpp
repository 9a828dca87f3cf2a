#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

struct NaiveLoss {
  double loss = 0, ce = 0, z = 0;
  int64_t counted = 0;
  std::vector<double> grad;
};

NaiveLoss naive_cross_entropy(const Tensor& logits, const std::vector<int64_t>& targets, double zw, int64_t ignore) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  const std::vector<double> x = values(logits);
  NaiveLoss out;
  out.grad.assign(x.size(), 0.0);
  std::vector<double> lse(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) max = std::max(max, x[i * V + j]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[i * V + j] - max);
    lse[i] = max + std::log(sum);
    if (targets[i] == ignore) continue;
    out.ce += lse[i] - x[i * V + targets[i]];
    out.z += zw * lse[i] * lse[i];
    ++out.counted;
  }
  if (out.counted == 0) return out;
  out.ce /= double(out.counted);
  out.z /= double(out.counted);
  out.loss = out.ce + out.z;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] == ignore) continue;
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(x[i * V + j] - lse[i]);
      // d(lse)/dx = p, d(x_t)/dx = onehot, d(lse^2)/dx = 2 lse p
      out.grad[i * V + j] = (p - (j == targets[i] ? 1.0 : 0.0) + zw * 2 * lse[i] * p) / double(out.counted);
    }
  }
  return out;
}

// Targets in [0, V) with every `ignore_every`-th row set to ignore_index.
Tensor targets_with_ignored(int64_t n, int64_t vocab, int64_t ignore_every, int64_t ignore, uint64_t seed, DType dt) {
  std::vector<int64_t> t = random_ints({n}, vocab, seed).to_vector<int64_t>();
  for (int64_t i = 0; i < n; i += ignore_every) t[i] = ignore;
  Tensor out = Tensor::from_vector(t, {n});
  if (dt == DType::i64) return out;
  return Tensor::from_vector(std::vector<int32_t>(t.begin(), t.end()), {n});
}

}  // namespace

TEST(CrossEntropy, MatchesNaiveWithIgnoredRowsAndZLoss) {
  const int64_t N = 100, V = 3001;  // large enough for the multi-threaded path
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t ignore : {int64_t(-100), int64_t(5)}) {  // the default, and a pad id inside the vocabulary
      Tensor logits = random_tensor({N, V}, dt, 1, -8, 8);
      Tensor targets = targets_with_ignored(N, V, 7, ignore, 2, ignore < 0 ? DType::i32 : DType::i64);
      const std::vector<int64_t> tv = targets.to(DType::i64).to_vector<int64_t>();
      const NaiveLoss want = naive_cross_entropy(logits, tv, 1e-2, ignore);
      CrossEntropyOutput out = cross_entropy_forward(logits, targets, 1e-2, ignore);
      const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
      EXPECT_EQ(out.counted, want.counted);
      EXPECT_EQ(out.counted, N - 15);
      EXPECT_NEAR(out.loss.item(), want.loss, tol * std::abs(want.loss));
      EXPECT_NEAR(out.ce, want.ce, tol * std::abs(want.ce));
      EXPECT_NEAR(out.z, want.z, tol * std::abs(want.z));
      const Tensor one = Tensor::full(Shape{}, 1.5, dt);
      Tensor grad = cross_entropy_backward(one, logits, targets, out.lse, 1e-2, ignore);
      std::vector<double> scaled = want.grad;
      for (double& g : scaled) g *= 1.5;
      expect_close(grad, scaled, tol * 1e-2, tol, dtype_name(dt));
    }
}

TEST(CrossEntropy, StableForLargeLogits) {
  Tensor logits = random_tensor({4, 50}, DType::f32, 3, 1000, 1010);
  Tensor targets = random_ints({4}, 50, 4);
  const NaiveLoss want = naive_cross_entropy(logits, targets.to_vector<int64_t>(), 0.0, -100);
  CrossEntropyOutput out = cross_entropy_forward(logits, targets, 0.0, -100);
  EXPECT_TRUE(std::isfinite(out.loss.item()));
  EXPECT_NEAR(out.loss.item(), want.loss, 1e-4);
}

TEST(CrossEntropy, AllRowsIgnoredGivesZeroLossAndZeroGrad) {
  Variable logits(random_tensor({3, 9}, DType::f32, 5), true);
  Tensor targets = Tensor::from_vector<int64_t>({-100, -100, -100}, {3});
  LossParts parts = cross_entropy(logits, targets, 1e-4);
  EXPECT_EQ(parts.counted, 0);
  EXPECT_EQ(parts.loss.value().item(), 0.0);
  EXPECT_EQ(parts.ce, 0.0);
  backward(parts.loss);
  expect_close(logits.grad(), std::vector<double>(27, 0.0), 0, 0);
}

TEST(CrossEntropy, Gradcheck) {
  auto f = [](const std::vector<Variable>& in) { return cross_entropy(in[0], in[1].value(), 0.1).loss; };
  Tensor targets = Tensor::from_vector<int64_t>({3, -100, 0, 6, 2}, {5});
  GradcheckResult r = gradcheck(f, {random_tensor({5, 7}, DType::f64, 6, -3, 3), targets});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(CrossEntropy, F32AgreesWithF64) {
  Tensor logits = random_tensor({40, 513}, DType::f64, 7, -5, 5);
  Tensor targets = random_ints({40}, 513, 8);
  Variable l64(logits, true), l32(logits.to(DType::f32), true);
  LossParts p64 = cross_entropy(l64, targets, 1e-4), p32 = cross_entropy(l32, targets, 1e-4);
  EXPECT_NEAR(p32.loss.value().item(), p64.loss.value().item(), 1e-5);
  backward(p64.loss);
  backward(p32.loss);
  expect_close(l32.grad(), l64.grad(), 1e-8, 1e-4);
}

TEST(CrossEntropy, BadTargetsAreErrorsNamingRowAndValue) {
  Variable logits(random_tensor({4, 10}, DType::f32, 1));
  expect_error(
      [&] {
        cross_entropy(logits, Tensor::from_vector<int64_t>({1, 2, 3, 10}, {4}), 0.0);
      },
      {"target 10", "row 3", "[0, 10)"});
  expect_error(
      [&] {
        cross_entropy(logits, Tensor::from_vector<int32_t>({1, -5, 3, 0}, {4}), 0.0);
      },
      {"target -5", "row 1"});
  expect_error([&] { cross_entropy(logits, random_ints({5}, 10, 2), 0.0); }, {"targets", "[N] = [4]"});
  expect_error([&] { cross_entropy(logits, random_tensor({4}, DType::f32, 3), 0.0); }, {"I32 or I64"});
  expect_error(
      [&] {
        cross_entropy(Variable(random_tensor({2, 2, 10}, DType::f32, 4)), random_ints({4}, 10, 5), 0.0);
      },
      {"[N, V]"});
  expect_error([&] { cross_entropy(logits, random_ints({4}, 10, 6), -1.0); }, {"z_loss_weight"});
}

// When the loss holds the logits alone, their gradient overwrites them: the same gradient, one
// logits-sized buffer less at the peak.
TEST(CrossEntropy, GradientOverwritesLogitsNothingElseHolds) {
  const int64_t N = 64, V = 1000;
  const Tensor x0 = random_tensor({N, V}, DType::f32, 31, -3, 3);
  const Tensor targets = Tensor::from_vector(std::vector<int32_t>(size_t(N), 7), {N});
  Allocator& allocator = allocator_for(Device::cpu());
  auto run = [&](bool keep_logits, size_t& peak) {
    Variable x(x0.clone(), /*requires_grad=*/true);
    allocator.reset_peak(Device::cpu());
    const size_t base = allocator.stats(Device::cpu()).current;
    {
      Variable kept;
      LossParts loss;
      if (keep_logits) {
        kept = scale(x, 2.0);
        loss = cross_entropy(kept, targets, 1e-4);
      } else {
        loss = cross_entropy(scale(x, 2.0), targets, 1e-4);
      }
      backward(loss.loss);
    }
    peak = allocator.stats(Device::cpu()).peak - base;
    return x.grad().clone();
  };
  size_t peak_kept = 0, peak_dropped = 0;
  const Tensor kept = run(true, peak_kept);
  const Tensor dropped = run(false, peak_dropped);
  EXPECT_EQ(values(kept), values(dropped));
  EXPECT_LE(peak_dropped + size_t(N * V) * sizeof(float), peak_kept);
}

// ---- The fused kernels: the gradient formed in the forward pass (linear_cross_entropy's chunks) ----

// The kernels alone: the fused forward returns the forward's outputs and leaves the backward's
// gradient in the logits; scale_grad_unless_expected leaves the gradient alone in the expected case.
TEST(CrossEntropyWithGrad, KernelsMatchForwardThenBackward) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x0 = random_tensor({33, 517}, dt, 49, -7, 7);
    const Tensor targets = targets_with_ignored(33, 517, 3, -100, 50, DType::i32);
    const Tensor expected = Tensor::full(Shape{}, 0.8, dt);
    Tensor logits = x0.clone();
    const CrossEntropyOutput fused = cross_entropy_forward_with_grad(logits, targets, 5e-3, -100, expected);
    const CrossEntropyOutput plain = cross_entropy_forward(x0, targets, 5e-3, -100);
    EXPECT_EQ(values(fused.lse), values(plain.lse));
    EXPECT_EQ(fused.loss.item(), plain.loss.item());
    const Tensor grad = cross_entropy_backward(expected, x0, targets, plain.lse, 5e-3, -100);
    EXPECT_EQ(values(logits), values(grad));

    // Unread, the parts stay in `sums` only (what the chunked loss gathers), and the rest is unchanged.
    Tensor unread_logits = x0.clone();
    const CrossEntropyOutput unread =
        cross_entropy_forward_with_grad(unread_logits, targets, 5e-3, -100, expected, false);
    EXPECT_EQ(unread.ce, 0.0);
    EXPECT_EQ(unread.z, 0.0);
    EXPECT_EQ(unread.counted, 0);
    const std::vector<double> sums = unread.sums.to_vector<double>();
    ASSERT_EQ(sums.size(), 3u);
    EXPECT_EQ(sums[2], double(plain.counted));
    EXPECT_NEAR(sums[0] / sums[2], plain.ce, 1e-12 * std::abs(plain.ce));
    EXPECT_NEAR(5e-3 * sums[1] / sums[2], plain.z, 1e-12 * std::abs(plain.z));
    EXPECT_EQ(values(unread_logits), values(logits));
    EXPECT_EQ(values(plain.sums), values(unread.sums));

    scale_grad_unless_expected(logits, Tensor::full(Shape{}, 0.8, dt), expected);
    EXPECT_EQ(values(logits), values(grad));
    scale_grad_unless_expected(logits, Tensor::full(Shape{}, -2.0, dt), expected);
    expect_close(logits, cross_entropy_backward(Tensor::full(Shape{}, -2.0, dt), x0, targets, plain.lse, 5e-3, -100),
                 1e-9, dt == DType::f32 ? 1e-6 : 1e-14);
  }
}

TEST(CrossEntropyWithGrad, BadArgumentsAreClearErrors) {
  const Tensor targets = random_ints({4}, 10, 51);
  Tensor logits = random_tensor({4, 10}, DType::f32, 54);
  expect_error(
      [&] { cross_entropy_forward_with_grad(logits, targets, 0.0, -100, Tensor::full(Shape{}, 1.0, DType::f64)); },
      {"cross_entropy_forward_with_grad", "grad_loss", "should be F32"});
  expect_error([&] { cross_entropy_forward_with_grad(logits, targets, 0.0, -100, Tensor::full({2}, 1.0, DType::f32)); },
               {"one element"});
  expect_error(
      [&] { cross_entropy_forward_with_grad(logits, targets, 0.0, -100, logits.narrow(0, 1).view({10}).narrow(0, 1)); },
      {"must not share storage"});
  expect_error(
      [&] {
        cross_entropy_forward_with_grad(logits, Tensor::from_vector<int64_t>({1, 2, 30, 3}, {4}), 0.0, -100,
                                        Tensor::full(Shape{}, 1.0, DType::f32));
      },
      {"target 30", "row 2"});
  const Tensor one32 = Tensor::full(Shape{}, 1.0, DType::f32), one64 = Tensor::full(Shape{}, 1.0, DType::f64);
  expect_error([&] { scale_grad_unless_expected(logits, one32, one64); },
               {"scale_grad_unless_expected", "one floating dtype"});
  expect_error([&] { scale_grad_unless_expected(logits, Tensor::full({2}, 1.0, DType::f32), one32); }, {"one element"});
  expect_error([&] { scale_grad_unless_expected(logits, one32, Tensor::full(Shape{}, 0.0, DType::f32)); },
               {"expected gradient is 0"});
}
