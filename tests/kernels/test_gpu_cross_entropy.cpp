// CUDA cross-entropy with z-loss against the CPU reference: vocabularies of 50257 and 100352 + 5
// (rows start at every alignment), ignored rows, bf16 logits with f32 lse and loss, the gradient
// out of place and over the logits themselves.
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
Tensor targets_with_ignored(int64_t rows, int64_t vocab, uint64_t seed, DType dtype) {
  Tensor t = random_ints({rows}, vocab, seed, DType::i64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < rows; i += 5) p[i] = -100;  // every fifth row ignored
  return dtype == DType::i64 ? t : t.to(DType::i32);
}

// Rows at every alignment: vocabularies 50257 and 100352 + 5 (rows the fused kernel keeps only
// partly in shared memory), 1000 and 7 (rows it keeps whole).
struct LossCase {
  int64_t rows, vocab;
};
constexpr LossCase kLossCases[] = {{37, 50257}, {16, 100352 + 5}, {129, 1000}, {3, 7}};

struct LossInputs {
  std::string what;
  GpuInput logits;
  Tensor targets;  // host; i32 or i64 by seed, every fifth row ignored
};
// Random logits in [-8, 8] and targets for one case; takes two seeds.
LossInputs loss_inputs(const LossCase& c, DType dt, uint64_t& seed) {
  LossInputs in;
  in.what = std::string(dtype_name(dt)) + " N=" + std::to_string(c.rows) + " V=" + std::to_string(c.vocab);
  in.logits = random_input({c.rows, c.vocab}, dt, seed++, -8, 8);
  const DType target_type = seed % 2 ? DType::i32 : DType::i64;
  in.targets = targets_with_ignored(c.rows, c.vocab, seed++, target_type);
  return in;
}
}  // namespace

TEST(GpuCrossEntropy, ForwardAndBackwardMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const LossCase& c : kLossCases) {
      const auto& [what, logits, targets] = loss_inputs(c, dt, seed);
      const CrossEntropyOutput got = cross_entropy_forward(logits.gpu, targets.to(kGpu), 1e-4, -100);
      const CrossEntropyOutput want = cross_entropy_forward(logits.cpu, targets, 1e-4, -100);
      EXPECT_EQ(got.counted, want.counted) << what;
      EXPECT_NEAR(got.ce, want.ce, 1e-5 * std::abs(want.ce)) << what;
      EXPECT_NEAR(got.z, want.z, 1e-5 * std::abs(want.z)) << what;
      EXPECT_EQ(got.loss.dtype(), DType::f32) << what;
      EXPECT_EQ(got.lse.dtype(), DType::f32) << what;
      EXPECT_NEAR(got.loss.item(), want.loss.item(), 1e-5 * std::abs(want.loss.item())) << what;
      EXPECT_GPU_CLOSE(got.lse, want.lse, DType::f32, what + " lse");
      const Tensor one_gpu = Tensor::full({}, 0.5, DType::f32, kGpu), one = Tensor::full({}, 0.5, DType::f32);
      const Tensor grad = cross_entropy_backward(one_gpu, logits.gpu, targets.to(kGpu), got.lse, 1e-4, -100);
      const Tensor grad_want = cross_entropy_backward(one, logits.cpu, targets, want.lse, 1e-4, -100);
      EXPECT_EQ(grad.dtype(), dt) << what;
      EXPECT_GPU_CLOSE(grad, grad_want, dt, what + " dlogits");
      // In place: the gradient overwrites the logits.
      Tensor in_place = logits.gpu.clone();
      cross_entropy_backward_into(one_gpu, in_place, targets.to(kGpu), got.lse, 1e-4, -100, in_place);
      EXPECT_TRUE(bitwise_equal(in_place, grad)) << what << " in place";
    }
}

TEST(GpuCrossEntropy, AllRowsIgnoredGiveZeroLossAndGradient) {
  FATHOM_REQUIRE_GPU();
  GpuInput logits = random_input({4, 11}, DType::f32, 1);
  const Tensor targets = Tensor::from_vector<int64_t>({-100, -100, -100, -100}, {4}).to(kGpu);
  const CrossEntropyOutput out = cross_entropy_forward(logits.gpu, targets, 1e-4, -100);
  EXPECT_EQ(out.counted, 0);
  EXPECT_EQ(out.loss.item(), 0.0);
  const Tensor grad =
      cross_entropy_backward(Tensor::full({}, 1.0, DType::f32, kGpu), logits.gpu, targets, out.lse, 1e-4, -100);
  EXPECT_TRUE(bitwise_equal(grad, Tensor::zeros({4, 11}, DType::f32)));
}

TEST(GpuCrossEntropy, ABadTargetIsAnErrorNamingItsRow) {
  FATHOM_REQUIRE_GPU();
  GpuInput logits = random_input({3, 10}, DType::bf16, 2);
  const Tensor targets = Tensor::from_vector<int32_t>({1, 10, 2}, {3}).to(kGpu);
  expect_error([&] { cross_entropy_forward(logits.gpu, targets, 0.0, -100); },
               {"cross_entropy", "target 10", "row 1", "[0, 10)"});
  const Tensor lse = Tensor::zeros({3}, DType::f32, kGpu);
  expect_error(
      [&] {
        cross_entropy_backward(Tensor::full({}, 1.0, DType::f32, kGpu), logits.gpu, targets, lse, 0.0, -100)
            .to(Device::cpu());
      },
      {"target 10", "row 1"});
  // A partially overlapping gradient buffer is refused.
  Tensor big = Tensor::zeros({4, 10}, DType::bf16, kGpu);
  Tensor overlap = big.narrow(1, 3);
  expect_error(
      [&] {
        cross_entropy_backward_into(Tensor::full({}, 1.0, DType::f32, kGpu), big.narrow(0, 3), targets, lse, 0.0, -100,
                                    overlap);
      },
      {"overlaps"});
}

// The forward with the gradient fused in (the training step's loss): the forward's outputs bit for
// bit, the backward's gradient over the logits, against the CPU reference too. The vocabularies
// cover rows kept whole in shared memory (1000, 7) and rows only partly kept there (50257 f32,
// 100352 + 5 in both dtypes), at every alignment; an upstream gradient other than the expected one
// is corrected by scale_grad_unless_expected.
TEST(GpuCrossEntropy, FusedForwardWritesTheBackwardsGradient) {
  FATHOM_REQUIRE_GPU();
  const double zw = 1e-3;
  uint64_t seed = 101;
  for (DType dt : {DType::f32, DType::bf16})
    for (const LossCase& c : kLossCases) {
      const auto& [what, logits, targets] = loss_inputs(c, dt, seed);
      const Tensor targets_gpu = targets.to(kGpu);
      const Tensor expected = Tensor::full({}, 0.25, DType::f32, kGpu);
      Tensor fused = logits.gpu.clone();
      const CrossEntropyOutput got = cross_entropy_forward_with_grad(fused, targets_gpu, zw, -100, expected);
      const CrossEntropyOutput plain = cross_entropy_forward(logits.gpu, targets_gpu, zw, -100);
      EXPECT_EQ(got.counted, plain.counted) << what;
      EXPECT_EQ(got.ce, plain.ce) << what;
      EXPECT_EQ(got.z, plain.z) << what;
      EXPECT_TRUE(bitwise_equal(got.loss, plain.loss)) << what << " loss";
      EXPECT_TRUE(bitwise_equal(got.lse, plain.lse)) << what << " lse";
      EXPECT_TRUE(bitwise_equal(got.sums, plain.sums)) << what << " sums";
      // Unread (no wait on the device): the same sums, the parts left for the caller.
      Tensor unread_logits = logits.gpu.clone();
      const CrossEntropyOutput unread =
          cross_entropy_forward_with_grad(unread_logits, targets_gpu, zw, -100, expected, false);
      EXPECT_EQ(unread.counted, 0) << what;
      EXPECT_EQ(unread.ce, 0.0) << what;
      EXPECT_TRUE(bitwise_equal(unread.sums, plain.sums)) << what << " unread sums";
      EXPECT_TRUE(bitwise_equal(unread_logits, fused)) << what << " unread gradient";
      // The gradient: the unfused kernel's formula on the same lse (bitwise where the compiler
      // contracted both alike; the tolerance allows one rounding of the bf16 output).
      const Tensor unfused = cross_entropy_backward(expected, logits.gpu, targets_gpu, plain.lse, zw, -100);
      EXPECT_LE(relative_l2(fused, unfused), dt == DType::bf16 ? 4e-3 : 1e-6) << what << " fused vs unfused";
      const CrossEntropyOutput want = cross_entropy_forward(logits.cpu, targets, zw, -100);
      const Tensor want_grad =
          cross_entropy_backward(Tensor::full({}, 0.25, DType::f32), logits.cpu, targets, want.lse, zw, -100);
      EXPECT_GPU_CLOSE(fused, want_grad, dt, what + " fused dlogits");
      // The expected upstream gradient leaves it untouched; another one rescales it.
      const Tensor before = fused.clone();
      scale_grad_unless_expected(fused, Tensor::full({}, 0.25, DType::f32, kGpu), expected);
      EXPECT_TRUE(bitwise_equal(fused, before)) << what << " expected upstream";
      scale_grad_unless_expected(fused, Tensor::full({}, -1.5, DType::f32, kGpu), expected);
      const Tensor want_rescaled =
          cross_entropy_backward(Tensor::full({}, -1.5, DType::f32), logits.cpu, targets, want.lse, zw, -100);
      EXPECT_GPU_CLOSE(fused, want_rescaled, dt, what + " rescaled dlogits");
    }
}

// The chunked head and loss against linear + cross_entropy on the GPU: rows not a multiple of the
// chunk, a vocabulary not a multiple of 8, an upstream gradient other than the expected one.
TEST(GpuCrossEntropy, ChunkedHeadAndLossMatchTheUnchunkedOps) {
  FATHOM_REQUIRE_GPU();
  const int64_t N = 300, d = 96, V = 5003;
  for (DType dt : {DType::f32, DType::bf16})
    for (double upstream : {0.5, -2.0}) {
      const std::string what = std::string(dtype_name(dt)) + " upstream " + std::to_string(upstream);
      const Tensor h0 = random_input({N, d}, dt, 21, -2, 2).gpu, w0 = random_input({V, d}, dt, 22, -1, 1).gpu;
      const Tensor targets = targets_with_ignored(N, V, 23, DType::i32).to(kGpu);
      auto run = [&](int64_t chunk, const Tensor& t) {
        Variable h(h0.clone(), true), w(w0.clone(), true);
        LossParts parts =
            chunk > 0 ? linear_cross_entropy(h, w, t, 1e-3, 0.5, chunk) : cross_entropy(linear(h, w), t, 1e-3);
        backward(parts.loss, Tensor::full(Shape{}, upstream, parts.loss.dtype(), kGpu));
        return std::make_tuple(parts.loss.value().item(), h.grad().clone(), w.grad().clone());
      };
      const auto [want_loss, want_dh, want_dw] = run(0, targets);
      for (int64_t chunk : {int64_t(64), int64_t(77), N}) {
        const auto [loss, dh, dw] = run(chunk, targets);
        EXPECT_NEAR(loss, want_loss, 1e-5 * std::abs(want_loss)) << what << " chunk " << chunk;
        const double tol = dt == DType::bf16 ? 1e-2 : 1e-5;
        EXPECT_LE(relative_l2(dh, want_dh), tol) << what << " chunk " << chunk;
        EXPECT_LE(relative_l2(dw, want_dw), tol) << what << " chunk " << chunk;
      }
      // Targets on the host (the training step's) give the same bits as on the device.
      const auto [device_loss, device_dh, device_dw] = run(77, targets);
      const auto [host_loss, host_dh, host_dw] = run(77, targets.to(Device::cpu()));
      EXPECT_EQ(host_loss, device_loss) << what;
      EXPECT_EQ(relative_l2(host_dh, device_dh), 0.0) << what;
      EXPECT_EQ(relative_l2(host_dw, device_dw), 0.0) << what;
    }
}

TEST(GpuCrossEntropy, FusedForwardReportsABadTarget) {
  FATHOM_REQUIRE_GPU();
  Tensor logits = random_input({3, 10}, DType::bf16, 3).gpu;
  const Tensor targets = Tensor::from_vector<int64_t>({1, 2, 10}, {3}).to(kGpu);
  expect_error(
      [&] { cross_entropy_forward_with_grad(logits, targets, 0.0, -100, Tensor::full({}, 1.0, DType::f32, kGpu)); },
      {"target 10", "row 2", "[0, 10)"});
}

// The row kernels index a row in 32 bits: a wider vocabulary is refused before anything runs (no
// rows here, so nothing is allocated).
TEST(GpuCrossEntropy, RowsWiderThanThirtyTwoBitsAreAClearError) {
  FATHOM_REQUIRE_GPU();
  const Tensor logits = Tensor::empty({0, int64_t(1) << 31}, DType::bf16, kGpu);
  const Tensor targets = Tensor::empty({0}, DType::i64, kGpu);
  expect_error([&] { cross_entropy_forward(logits, targets, 0.0, -100); }, {"cross_entropy", "2147483648", "2^31 - 1"});
  const Tensor lse = Tensor::empty({0}, DType::f32, kGpu);
  Tensor grad = Tensor::empty({0, int64_t(1) << 31}, DType::bf16, kGpu);
  expect_error(
      [&] {
        cross_entropy_backward_into(Tensor::full({}, 1.0, DType::f32, kGpu), logits, targets, lse, 0.0, -100, grad);
      },
      {"cross_entropy_backward", "2147483648"});
}
