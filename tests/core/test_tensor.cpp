#include <gtest/gtest.h>

#include <cmath>

#include "core/host_memory_cache.h"
#include "core/philox.h"
#include "core/random.h"
#include "core/tensor.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor row = t.select(1);
  EXPECT_EQ(row.shape(), Shape({2}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{3, 4}));
  Tensor tail = t.narrow(1, 2).view({4});
  tail.data<float>()[0] = 30;
  EXPECT_EQ(t.data<float>()[2], 30);
  EXPECT_TRUE(tail.shares_storage_with(t));
}

TEST(Tensor, BadViewsAreClearErrors) {
  Tensor t = Tensor::zeros({3, 2}, DType::f32);
  EXPECT_THROW(t.view({4}), Error);
  EXPECT_THROW(t.narrow(2, 2), Error);
  EXPECT_THROW(t.data<double>(), Error);
  if (!test::gpu_present()) {
    EXPECT_THROW(Tensor::zeros({2}, DType::f32, Device::cuda()), Error);
  }
}

// Tests run with poisoned host allocations (poisoned_host_memory.cpp): empty tensors hold NaN, even
// when their block comes back from the allocator's cache; zeros() still writes its zeros.
TEST(Tensor, EmptyHostTensorsArePoisonedUnderTest) {
  for (int round = 0; round < 2; ++round) {
    Tensor t = Tensor::empty({70000}, DType::f32);  // above the cache's 64 KiB floor: reused in round 2
    for (float x : t.to_vector<float>()) ASSERT_TRUE(std::isnan(x));
    t.fill_(1.f);
  }
  for (float x : Tensor::zeros({70000}, DType::f32).to_vector<float>()) ASSERT_EQ(x, 0.f);
  for (float x : Tensor::empty({5}, DType::bf16).to(DType::f32).to_vector<float>()) EXPECT_TRUE(std::isnan(x));
}

TEST(Tensor, HalfPrecisionRoundTrips) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.14159f, 65504.0f, 1e-5f, -6.1e-5f, 1e-7f}) {
    EXPECT_NEAR(bf16_to_float(float_to_bf16(f)), f, std::abs(f) * 1e-2 + 1e-30) << f;
    EXPECT_NEAR(f16_to_float(float_to_f16(f)), f, std::abs(f) * 1e-3 + 6e-8) << f;
  }
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(float_to_f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f).bits, 0xc000);
  Tensor t = Tensor::from_vector<float>({1.5f, -0.25f}, {2});
  EXPECT_EQ(t.to(DType::bf16).to(DType::f32).to_vector<float>(), (std::vector<float>{1.5f, -0.25f}));
}

TEST(Philox, KnownAnswer) {
  // Random123 known-answer test for philox4x32-10: counter and key all ones (0xffffffff).
  philox::U32x4 r =
      philox::philox4x32({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(r.v[0], 0x408f276du);
  EXPECT_EQ(r.v[1], 0x41c83b0eu);
  EXPECT_EQ(r.v[2], 0xa20bc7c6u);
  EXPECT_EQ(r.v[3], 0x6d5451fdu);
}

TEST(Random, TruncatedNormalStatistics) {
  Tensor t = Tensor::empty({20000}, DType::f32);
  Generator gen{42, 0};
  fill_truncated_normal(t, gen, 0.02, 3.0);
  EXPECT_EQ(gen.offset, 20000u);
  double sum = 0, sq = 0, maxabs = 0;
  for (float x : t.to_vector<float>()) {
    sum += x;
    sq += double(x) * x;
    maxabs = std::max(maxabs, double(std::abs(x)));
  }
  EXPECT_NEAR(sum / 20000, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / 20000), 0.02 * 0.986, 1e-3);  // truncation at 3 sigma shrinks std by 1.4%
  EXPECT_LE(maxabs, 0.06 + 1e-7);
  Tensor again = Tensor::empty({20000}, DType::f32);
  Generator gen2{42, 0};
  fill_truncated_normal(again, gen2, 0.02, 3.0);
  EXPECT_EQ(t.to_vector<float>(), again.to_vector<float>());
}

TEST(Allocator, CountsLiveBytesAndPeakAndReusesBlocks) {
  Allocator& host = allocator_for(Device::cpu());
  // Earlier tests in this process may have filled the cache up to its limit, where a freed block is
  // no longer kept: start from an empty cache so that the expectations below hold in any order.
  release_cached_host_memory();
  host.reset_peak(Device::cpu());
  const MemoryStats start = host.stats(Device::cpu());
  const void* first_address = nullptr;
  {
    Tensor big = Tensor::empty({1 << 18}, DType::f32);  // 1 MiB
    first_address = big.raw();
    const MemoryStats live = host.stats(Device::cpu());
    EXPECT_EQ(live.current, start.current + (size_t(1) << 20));
    EXPECT_GE(live.peak, live.current);
  }
  const MemoryStats after = host.stats(Device::cpu());
  EXPECT_EQ(after.current, start.current);
  EXPECT_GE(after.peak, start.current + (size_t(1) << 20));
  EXPECT_GE(after.cached, size_t(1) << 20);
  // The cache still holds the block: held counts it with the live bytes, and reuse adds nothing.
  EXPECT_EQ(after.held, after.current + after.cached);
  EXPECT_GE(after.held_peak, start.current + (size_t(1) << 20));
  Tensor again = Tensor::empty({1 << 18}, DType::f32);
  EXPECT_EQ(again.raw(), first_address) << "a freed block of the same size is reused";
  EXPECT_EQ(host.stats(Device::cpu()).held, after.held);
}
