// Mixed precision's host-side plumbing, checked on the CPU (the bf16 compute itself is CUDA-only,
// tests/layers/test_gpu_mixed_precision.cpp): the arena's bf16 copy is round(master) after
// initialise, load and every optimizer step, and each parameter reads it through its compute view.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/adamw/adamw.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"
#include "train/cli/device_select.h"

using namespace fathom;

namespace {

ModelConfig tiny() {
  return {.d_model = 16, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1, .ffn_hidden = 24, .vocab_size = 19};
}

// Bitwise equality of the copy with the master weights rounded to its dtype.
void expect_copy_is_rounded_master(ParameterArena& arena) {
  const Tensor want = arena.values().to(DType::bf16), got = arena.compute_values();
  ASSERT_EQ(got.dtype(), DType::bf16);
  ASSERT_EQ(got.numel(), want.numel());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
}

}  // namespace

TEST(MixedPrecisionArena, CopyFollowsInitLoadAndEveryOptimizerStep) {
  Decoder model(tiny());
  ParameterArena arena(model, Device::cpu());
  arena.initialise(4);
  EXPECT_FALSE(arena.has_compute_copy());
  for (const ArenaEntry& e : arena.entries()) EXPECT_FALSE(e.var.has_compute_copy()) << e.name;

  arena.enable_compute_copy(DType::bf16);
  expect_copy_is_rounded_master(arena);
  for (const ArenaEntry& e : arena.entries()) {
    ASSERT_TRUE(e.var.has_compute_copy()) << e.name;
    EXPECT_EQ(e.var.compute_value().shape(), e.shape) << e.name;
    EXPECT_TRUE(e.var.compute_value().shares_storage_with(arena.compute_values())) << e.name;
    EXPECT_EQ(e.var.value().dtype(), DType::f32) << "the master stays F32";
  }
  arena.initialise(5);
  expect_copy_is_rounded_master(arena);

  AdamW optimizer(arena, AdamWConfig{0.9, 0.95, 1e-8, 0.1});
  for (int step = 0; step < 3; ++step) {
    arena.grads().copy_from(test::random_tensor({arena.numel()}, DType::f32, 40 + uint64_t(step)));
    const Tensor before = arena.compute_values().clone();
    optimizer.step(1e-2);
    expect_copy_is_rounded_master(arena);
    EXPECT_NE(std::memcmp(before.raw(), arena.compute_values().raw(), before.nbytes()), 0) << "step " << step;
  }

  Decoder other(tiny());
  ParameterArena source(other, Device::cpu());
  source.initialise(99);
  arena.load(source.named_values(), "test");
  expect_copy_is_rounded_master(arena);
}

TEST(MixedPrecisionArena, OptimizerWithoutCopyIsUnchanged) {
  // The fused ranges call the optimizer now makes is the same arithmetic as one update per range.
  Decoder a(tiny()), b(tiny());
  ParameterArena fused(a, Device::cpu()), per_range(b, Device::cpu());
  fused.initialise(8);
  per_range.initialise(8);
  AdamW optimizer(fused, AdamWConfig{0.9, 0.95, 1e-8, 0.1});
  Tensor m = Tensor::zeros({per_range.numel()}, DType::f32), v = Tensor::zeros({per_range.numel()}, DType::f32);
  for (int64_t step = 1; step <= 2; ++step) {
    const Tensor g = test::random_tensor({fused.numel()}, DType::f32, 60 + uint64_t(step));
    fused.grads().copy_from(g);
    optimizer.step(3e-3);
    for (const ParameterArena::Range& r : per_range.decay_ranges()) {
      const int64_t n = r.end - r.begin;
      Tensor p = per_range.values().narrow(r.begin, n), mr = m.narrow(r.begin, n), vr = v.narrow(r.begin, n);
      adamw_update(p, g.narrow(r.begin, n), mr, vr, {3e-3, 0.9, 0.95, 1e-8, r.weight_decay ? 0.1 : 0.0, step});
    }
  }
  EXPECT_EQ(fused.values().to_vector<float>(), per_range.values().to_vector<float>());
}

TEST(MixedPrecisionArena, BadRequestsAreErrors) {
  Decoder model(tiny());
  ParameterArena arena(model, Device::cpu());
  fathom::testing::expect_error([&] { arena.enable_compute_copy(DType::f32); }, {"BF16 or F16", "F32"});
  arena.enable_compute_copy(DType::bf16);
  fathom::testing::expect_error([&] { arena.enable_compute_copy(DType::bf16); }, {"already has a compute copy"});
}

TEST(AdamWComputeCopy, CpuReferenceWritesRoundedRangesOnly) {
  const int64_t n = 1000;
  Tensor p = test::random_tensor({n}, DType::f32, 1), g = test::random_tensor({n}, DType::f32, 2);
  Tensor m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
  Tensor copy = Tensor::full({n}, 7.0, DType::bf16);
  const std::vector<AdamWRange> ranges{{10, 400, 0.1}, {400, 700, 0.0}, {900, 1000, 0.1}};
  adamw_update_ranges(p, g, m, v, ranges, {1e-2, 0.9, 0.95, 1e-8, 0.0, 1}, &copy);
  const std::vector<float> got = copy.to(DType::f32).to_vector<float>();
  const std::vector<float> want = p.to(DType::bf16).to(DType::f32).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const bool inside = (i >= 10 && i < 700) || i >= 900;
    ASSERT_EQ(got[size_t(i)], inside ? want[size_t(i)] : 7.0f) << "element " << i;
  }
}

TEST(MixedPrecisionArena, OnlyBf16OnAGpuIsMixed) {
  EXPECT_TRUE(uses_mixed_precision("bf16", Device::cuda(0)));
  EXPECT_FALSE(uses_mixed_precision("fp32", Device::cuda(0)));
  EXPECT_FALSE(uses_mixed_precision("bf16", Device::cpu())) << "the CPU always computes in fp32";
}
