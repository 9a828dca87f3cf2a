// The CUDA runtime: start-up, caching allocator (statistics, reuse, out-of-memory message, streams),
// copies, casts and fills, and errors found by kernels in device data.
#include <cstring>
#include <vector>

#include "core/allocator.h"
#include "core/backend.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuRuntime, InitIsIdempotentAndRegistersTheBackend) {
  FATHOM_REQUIRE_GPU();
  EXPECT_TRUE(gpu_present());
  EXPECT_TRUE(cuda_backend_available());
#ifdef FATHOM_WITH_CUDA
  EXPECT_TRUE(cuda::init());
  EXPECT_GE(cuda::device_count(), 1);
#endif
}

TEST(GpuRuntime, CopiesRoundTripBetweenHostAndDevice) {
  FATHOM_REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(3) << 20}) {
    const Tensor host = random_tensor({n}, DType::f32, uint64_t(n));
    Tensor dev = host.to(kGpu);
    EXPECT_EQ(dev.device(), kGpu);
    Tensor dev2 = dev.clone();  // device -> device
    Tensor back = dev2.to(Device::cpu());
    EXPECT_TRUE(bitwise_equal(back, host)) << n;
  }
  // Views at odd offsets copy their own bytes only.
  const Tensor host = random_tensor({7, 5}, DType::f32, 3);
  Tensor dev = host.to(kGpu);
  EXPECT_TRUE(bitwise_equal(dev.narrow(3, 2), host.narrow(3, 2)));
  Tensor dst = Tensor::zeros({2, 5}, DType::f32, kGpu);
  dst.copy_from(host.narrow(1, 2));
  EXPECT_TRUE(bitwise_equal(dst, host.narrow(1, 2)));
}

TEST(GpuRuntime, ZerosAndFillsInEveryDtype) {
  FATHOM_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    const Tensor z = Tensor::zeros({1001}, t, kGpu);
    EXPECT_TRUE(bitwise_equal(z, Tensor::zeros({1001}, t))) << dtype_name(t);
    const Tensor f = Tensor::full({1001}, 3.0, t, kGpu);
    EXPECT_TRUE(bitwise_equal(f, Tensor::full({1001}, 3.0, t))) << dtype_name(t);
  }
  // A fill of a view leaves its neighbours alone.
  Tensor t = Tensor::zeros({5, 3}, DType::bf16, kGpu);
  Tensor mid = t.narrow(1, 3);
  mid.fill_(-1.5);
  const std::vector<double> v = values(t.to(Device::cpu()));
  for (int i = 0; i < 15; ++i) EXPECT_EQ(v[size_t(i)], i >= 3 && i < 12 ? -1.5 : 0.0) << i;
}

TEST(GpuRuntime, CastsMatchTheHostConversionsForEveryDtypePair) {
  FATHOM_REQUIRE_GPU();
  const std::vector<DType> all = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8};
  // Values every dtype holds (small non-negative integers and halves for the floats), plus an odd
  // length and an odd offset, so packed and element-wise paths both run.
  std::vector<double> v(1003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 37) % 200);
  const Tensor base = Tensor::from_vector(v, {int64_t(v.size())});
  for (DType from : all)
    for (DType to : all) {
      const Tensor src = base.to(from);
      const Tensor got = src.to(kGpu).to(to);
      EXPECT_EQ(got.dtype(), to);
      EXPECT_TRUE(bitwise_equal(got, src.to(to))) << dtype_name(from) << " -> " << dtype_name(to);
      const Tensor view = src.to(kGpu).narrow(1, 1001).to(to);
      EXPECT_TRUE(bitwise_equal(view, src.narrow(1, 1001).to(to))) << dtype_name(from) << " -> " << dtype_name(to);
    }
  // Rounding f32 -> bf16 of random values agrees with the host's round-to-nearest-even.
  const Tensor r = random_tensor({4097}, DType::f32, 9, -100, 100);
  EXPECT_TRUE(bitwise_equal(r.to(kGpu).to(DType::bf16), r.to(DType::bf16)));
  EXPECT_TRUE(bitwise_equal(r.to(kGpu).to(DType::f16), r.to(DType::f16)));
}

TEST(GpuAllocator, ReportsCurrentPeakAndCachedBytesAndReusesBlocks) {
  FATHOM_REQUIRE_GPU();
  // Start from an empty cache: blocks other tests left behind could serve the second request.
#ifdef FATHOM_WITH_CUDA
  cuda::empty_cache(kGpu.index);
#endif
  Allocator& a = allocator_for(kGpu);
  a.reset_peak(kGpu);
  const MemoryStats before = a.stats(kGpu);
  const void* first_address = nullptr;
  {
    Tensor t = Tensor::empty({int64_t(10) << 20}, DType::f32, kGpu);  // 40 MiB
    first_address = t.raw();
    const MemoryStats during = a.stats(kGpu);
    EXPECT_GE(during.current, before.current + (size_t(40) << 20));
    EXPECT_GE(during.peak, during.current);
  }
  const MemoryStats after = a.stats(kGpu);
  EXPECT_EQ(after.current, before.current);
  EXPECT_GE(after.peak, before.current + (size_t(40) << 20));
  EXPECT_GE(after.cached, size_t(40) << 20);
  EXPECT_GE(after.held, after.current + after.cached);  // pending blocks are held too
  EXPECT_GE(after.held_peak, before.current + (size_t(40) << 20));
  // The same size again reuses the cached block (same stream): no new device memory.
  Tensor again = Tensor::empty({int64_t(10) << 20}, DType::f32, kGpu);
  EXPECT_EQ(again.raw(), first_address);
  EXPECT_EQ(a.stats(kGpu).held, after.held);
  EXPECT_EQ(a.stats(kGpu).cached, after.cached - (a.stats(kGpu).current - after.current));
  a.reset_peak(kGpu);
  EXPECT_EQ(a.stats(kGpu).peak, a.stats(kGpu).current);
}

TEST(GpuAllocator, OutOfMemoryIsAClearErrorWithSizesAndAHint) {
  FATHOM_REQUIRE_GPU();
  const int64_t huge = int64_t(1) << 50;  // 1 PiB
  expect_error([&] { Tensor::empty({huge}, DType::u8, kGpu); },
               {"CUDA out of memory on cuda:0", "1125899906842624 bytes requested", "free", "train.batch_size",
                "train.recompute: block"});
  // The device stays usable afterwards.
  const Tensor h = random_tensor({100}, DType::f32, 1);
  EXPECT_TRUE(bitwise_equal(h.to(kGpu), h));
}

TEST(GpuAllocator, ABlockUsedOnAnotherStreamIsNotReusedBeforeThatStreamFinishes) {
  FATHOM_REQUIRE_GPU();
#ifdef FATHOM_WITH_CUDA
  cuda::Stream side = cuda::Stream::create(0);
  const int64_t n = int64_t(1) << 24;  // 64 MiB
  Tensor x = random_tensor({n}, DType::f32, 5).to(kGpu);
  cuda::stream_wait(side.handle(), cuda::current_stream(0));  // x is written before the side stream reads it
  cuda::record_stream(x, side.handle());
  {
    cuda::StreamGuard guard(side);
    EXPECT_EQ(cuda::current_stream(0), side.handle());
    for (int i = 0; i < 200; ++i) scale_inplace(x, 1.0);  // several milliseconds of work on the side stream
  }
  EXPECT_NE(cuda::current_stream(0), side.handle());
  const void* old = x.raw();
  x = Tensor();  // freed while the side stream still works on it
  Tensor y = Tensor::empty({n}, DType::f32, kGpu);
  if (y.raw() == old) {
    EXPECT_TRUE(side.query()) << "a block was reused while another stream still used it";
  }
  side.synchronize();
  Tensor small = Tensor::empty({16}, DType::f32, kGpu);  // any allocation collects finished blocks
  if (y.raw() != old) {
    EXPECT_GE(allocator_for(kGpu).stats(kGpu).cached, size_t(n) * 4);
  }
#endif
}

TEST(GpuDeviceErrors, ABadTokenIdFoundByAKernelIsReportedAtTheNextSynchronisation) {
  FATHOM_REQUIRE_GPU();
  const Tensor table = random_tensor({10, 4}, DType::f32, 1).to(kGpu);
  const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 12, 3}, {4}).to(kGpu);
  Tensor out = embedding_forward(ids, table);  // queued; the kernel writes a zero row for id 12
  expect_error([&] { out.to(Device::cpu()); }, {"embedding", "token id 12", "position 2", "[0, 10)"});
  // Reported once: the backend is clean afterwards.
  const Tensor good = Tensor::from_vector<int64_t>({1, 2}, {2}).to(kGpu);
  EXPECT_TRUE(bitwise_equal(embedding_forward(good, table),
                            embedding_forward(good.to(Device::cpu()), table.to(Device::cpu()))));
}
