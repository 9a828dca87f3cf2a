// CUDA cross-entropy with z-loss against the CPU reference: vocabularies of 50257 and 100352 + 5
// (rows start at every alignment), ignored rows, bf16 logits with f32 lse and loss, the gradient
// out of place and over the logits themselves.
#include "kernels/cross_entropy.h"
#include "tests/gpu/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
Tensor targets_with_ignored(int64_t rows, int64_t vocab, uint64_t seed, DType dtype) {
  Tensor t = random_ints({rows}, vocab, seed, DType::i64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < rows; i += 5) p[i] = -100;  // every fifth row ignored
  return dtype == DType::i64 ? t : t.to(DType::i32);
}
}  // namespace

TEST(GpuCrossEntropy, ForwardAndBackwardMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  struct Case {
    int64_t rows, vocab;
  };
  const Case cases[] = {{37, 50257}, {16, 100352 + 5}, {129, 1000}, {3, 7}};
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Case& c : cases) {
      const std::string what = std::string(dtype_name(dt)) + " N=" + std::to_string(c.rows) + " V=" + std::to_string(c.vocab);
      GpuInput logits = random_input({c.rows, c.vocab}, dt, seed++, -8, 8);
      const DType target_type = seed % 2 ? DType::i32 : DType::i64;
      const Tensor targets = targets_with_ignored(c.rows, c.vocab, seed++, target_type);
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
  const Tensor grad = cross_entropy_backward(Tensor::full({}, 1.0, DType::f32, kGpu), logits.gpu, targets, out.lse, 1e-4, -100);
  EXPECT_TRUE(bitwise_equal(grad, Tensor::zeros({4, 11}, DType::f32)));
}

TEST(GpuCrossEntropy, ABadTargetIsAnErrorNamingItsRow) {
  FATHOM_REQUIRE_GPU();
  GpuInput logits = random_input({3, 10}, DType::bf16, 2);
  const Tensor targets = Tensor::from_vector<int32_t>({1, 10, 2}, {3}).to(kGpu);
  expect_error([&] { cross_entropy_forward(logits.gpu, targets, 0.0, -100); },
               {"cross_entropy", "target 10", "row 1", "[0, 10)"});
  const Tensor lse = Tensor::zeros({3}, DType::f32, kGpu);
  expect_error([&] {
    cross_entropy_backward(Tensor::full({}, 1.0, DType::f32, kGpu), logits.gpu, targets, lse, 0.0, -100).to(Device::cpu());
  }, {"target 10", "row 1"});
  // A partially overlapping gradient buffer is refused.
  Tensor big = Tensor::zeros({4, 10}, DType::bf16, kGpu);
  Tensor overlap = big.narrow(1, 3);
  expect_error([&] {
    cross_entropy_backward_into(Tensor::full({}, 1.0, DType::f32, kGpu), big.narrow(0, 3), targets, lse, 0.0, -100, overlap);
  }, {"overlaps"});
}
