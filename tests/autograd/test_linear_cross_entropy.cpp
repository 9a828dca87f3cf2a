// linear_cross_entropy: the chunked head and loss must give what linear + cross_entropy
// give (loss, its parts, dh, dW) for any chunking, with ignored rows, z-loss and an unexpected upstream
// gradient; without a gradient to form it is the plain loss; bad inputs are errors naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"

using namespace fathom;
using namespace fathom::test;

namespace {

Tensor targets_every(int64_t n, int64_t vocab, int64_t ignore_every, int64_t ignore, uint64_t seed) {
  std::vector<int64_t> t = random_ints({n}, vocab, seed).to_vector<int64_t>();
  for (int64_t i = 0; i < n; i += ignore_every) t[i] = ignore;
  return Tensor::from_vector(t, {n});
}

struct HeadLoss {
  LossParts parts;
  Tensor dh, dw;
  std::string node;
};

// chunk_rows 0: the reference, linear then cross_entropy.
HeadLoss run(const Tensor& h0, const Tensor& w0, const Tensor& targets, double zw, int64_t ignore, double expected,
             double upstream, int64_t chunk_rows) {
  Variable h(h0.clone(), true), w(w0.clone(), true);
  HeadLoss out;
  out.parts = chunk_rows > 0 ? linear_cross_entropy(h, w, targets, zw, expected, chunk_rows, ignore)
                             : cross_entropy(linear(h, w), targets, zw, ignore);
  out.node = out.parts.loss.grad_fn()->name();
  backward(out.parts.loss, Tensor::full(Shape{}, upstream, out.parts.loss.dtype()));
  out.dh = h.grad();
  out.dw = w.grad();
  return out;
}

}  // namespace

TEST(LinearCrossEntropy, MatchesTheHeadAndLossOpsForAnyChunking) {
  const int64_t N = 37, d = 19, V = 211;
  const double zw = 1e-2, expected = 0.25;
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
    const Tensor h0 = random_tensor({N, d}, dt, 1, -2, 2), w0 = random_tensor({V, d}, dt, 2, -1, 1);
    for (int64_t ignore : {int64_t(-100), int64_t(5)})
      for (double upstream : {expected, -1.3}) {
        const Tensor targets = targets_every(N, V, 6, ignore, 3);
        const HeadLoss want = run(h0, w0, targets, zw, ignore, expected, upstream, 0);
        for (int64_t chunk : {int64_t(1), int64_t(5), int64_t(36), N, int64_t(100)}) {
          const std::string what = std::string(dtype_name(dt)) + " ignore " + std::to_string(ignore) + " upstream " +
                                   std::to_string(upstream) + " chunk " + std::to_string(chunk);
          const HeadLoss got = run(h0, w0, targets, zw, ignore, expected, upstream, chunk);
          EXPECT_EQ(got.node, "linear_cross_entropy") << what;
          EXPECT_EQ(got.parts.counted, N - 7) << what;
          EXPECT_NEAR(got.parts.loss.value().item(), want.parts.loss.value().item(), tol * 10) << what;
          EXPECT_NEAR(got.parts.ce, want.parts.ce, tol * 10) << what;
          EXPECT_NEAR(got.parts.z, want.parts.z, tol * 10) << what;
          EXPECT_GT(got.parts.z, 0.0) << what;
          expect_close(got.dh, want.dh, tol, tol * 10, what + " dh");
          expect_close(got.dw, want.dw, tol, tol * 10, what + " dW");
        }
      }
  }
}

// The training step's seeding: backward(scale(loss, 1/3)) delivers exactly the expected gradient 1/3
// (rounded as the loss's dtype rounds it), so the gradients formed in the forward need no correction:
// they are the unchunked ops' for a single chunk, bit for bit.
TEST(LinearCrossEntropy, AScaledSeedOfTheExpectedGradientNeedsNoCorrection) {
  const Tensor h0 = random_tensor({9, 12}, DType::f32, 43, -2, 2), w0 = random_tensor({301, 12}, DType::f32, 44);
  const Tensor targets = targets_every(9, 301, 4, -100, 45);
  auto run_scaled = [&](bool fused) {
    Variable h(h0.clone(), true), w(w0.clone(), true);
    const LossParts parts =
        fused ? linear_cross_entropy(h, w, targets, 1e-3, 1.0 / 3, 9) : cross_entropy(linear(h, w), targets, 1e-3);
    backward(scale(parts.loss, 1.0 / 3));
    return std::make_pair(values(h.grad()), values(w.grad()));
  };
  EXPECT_EQ(run_scaled(true), run_scaled(false));
}

TEST(LinearCrossEntropy, AllTargetsIgnoredGiveZeroLossAndGradients) {
  const Tensor h0 = random_tensor({6, 4}, DType::f32, 4), w0 = random_tensor({9, 4}, DType::f32, 5);
  const Tensor targets = Tensor::from_vector<int64_t>({-100, -100, -100, -100, -100, -100}, {6});
  const HeadLoss got = run(h0, w0, targets, 1e-3, -100, 1.0, 1.0, 4);
  EXPECT_EQ(got.parts.counted, 0);
  EXPECT_EQ(got.parts.loss.value().item(), 0.0);
  EXPECT_EQ(values(got.dh), std::vector<double>(24, 0.0));
  EXPECT_EQ(values(got.dw), std::vector<double>(36, 0.0));
}

TEST(LinearCrossEntropy, WithoutAGradientItIsThePlainLoss) {
  const Tensor h0 = random_tensor({10, 8}, DType::f32, 6), w0 = random_tensor({30, 8}, DType::f32, 7);
  const Tensor targets = targets_every(10, 30, 4, -100, 8);
  const LossParts plain = cross_entropy(linear(Variable(h0), Variable(w0)), targets, 1e-2);
  const LossParts frozen = linear_cross_entropy(Variable(h0), Variable(w0), targets, 1e-2, 1.0, 3);
  EXPECT_FALSE(frozen.loss.requires_grad());
  EXPECT_EQ(frozen.loss.value().item(), plain.loss.value().item());
  NoGrad evaluating;
  const LossParts eval = linear_cross_entropy(Variable(h0, true), Variable(w0, true), targets, 1e-2, 1.0, 3);
  EXPECT_FALSE(eval.loss.requires_grad());
  EXPECT_EQ(eval.loss.value().item(), plain.loss.value().item());
}

// Only the input that needs a gradient gets one (a frozen head still passes dh on).
TEST(LinearCrossEntropy, FormsOnlyTheGradientsThatAreNeeded) {
  const Tensor h0 = random_tensor({7, 5}, DType::f32, 9), w0 = random_tensor({13, 5}, DType::f32, 10);
  const Tensor targets = targets_every(7, 13, 3, -100, 11);
  Variable h(h0.clone(), true), w(w0.clone(), false);
  backward(linear_cross_entropy(h, w, targets, 0.0, 1.0, 2).loss);
  const HeadLoss want = run(h0, w0, targets, 0.0, -100, 1.0, 1.0, 0);
  expect_close(h.grad(), want.dh, 1e-6, 1e-5, "dh");
  EXPECT_FALSE(w.grad().defined());
}

TEST(LinearCrossEntropy, BadInputsAreErrors) {
  const Variable h(random_tensor({40, 4}, DType::f32, 12), true), w(random_tensor({9, 4}, DType::f32, 13), true);
  const Tensor good = targets_every(40, 9, 5, -100, 14);
  std::vector<int64_t> bad = good.to_vector<int64_t>();
  bad[30] = 9;
  fathom::testing::expect_error([&] { linear_cross_entropy(h, w, Tensor::from_vector(bad, {40}), 0.0, 1.0, 8); },
                                {"target 9 at row 30", "outside the vocabulary [0, 9)"});
  fathom::testing::expect_error([&] { linear_cross_entropy(h, w, good, 0.0, 1.0, 0); },
                                {"chunk_rows must be >= 1, got 0"});
  fathom::testing::expect_error([&] { linear_cross_entropy(h, w, good, 0.0, 0.0, 8); },
                                {"expected_grad must be finite and nonzero", "got 0"});
  fathom::testing::expect_error([&] { linear_cross_entropy(h, w, good, 0.0, std::nan(""), 8); },
                                {"expected_grad must be finite and nonzero"});
  fathom::testing::expect_error([&] { linear_cross_entropy(Variable(), w, good, 0.0, 1.0, 8); }, {"undefined input"});
  fathom::testing::expect_error([&] { linear_cross_entropy(h, w, good.narrow(0, 39), 0.0, 1.0, 8); },
                                {"targets must be [N]"});
  const Variable wrong(random_tensor({9, 5}, DType::f32, 15), true);
  fathom::testing::expect_error([&] { linear_cross_entropy(h, wrong, good, 0.0, 1.0, 8); },
                                {"h must be [N, d] and the weight [V, d]"});
}
