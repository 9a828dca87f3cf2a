// CUDA FP8 kernels against the CPU reference (kernels/fp8, kernels/matmul/fp8_matmul.h): the device
// conversion on a sweep of floats, the amax, the scaled cast and the cast-transpose bit for bit on awkward
// shapes (rows not a multiple of 16, one row, all-zero, values at +-448, tiny subnormals, NaN and Inf),
// and the cuBLASLt FP8 GEMM within f32 accumulation error.
#include <cmath>
#include <cstring>

#include "core/fp8.h"
#include "kernels/fp8/fp8.h"
#include "kernels/matmul/fp8_matmul.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

bool same_bytes(const Tensor& gpu, const Tensor& cpu) { return bitwise_equal(gpu, cpu); }

bool all_zero_bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(h.raw());
  for (size_t i = 0; i < h.nbytes(); ++i)
    if (p[i] != 0) return false;
  return true;
}

// A 2-D F32 tensor with the values an FP8 cast finds hard: the range edges, subnormals of both formats,
// ties, and (optionally) NaN / Inf at one place.
Tensor awkward_values(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor x = random_tensor({rows, cols}, DType::f32, seed, -2, 2);
  float* v = x.data<float>();
  const float specials[] = {
      448.0f, -448.0f, 447.9f, std::ldexp(1.0f, -9), -std::ldexp(1.0f, -10), std::ldexp(3.0f, -10), 1.0625f,
      0.0f,   -0.0f,   1e-30f, std::ldexp(1.0f, -16)};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float) && int64_t(i) < x.numel(); ++i)
    v[(int64_t(i) * 7919) % x.numel()] = specials[i];
  return x;
}

}  // namespace

TEST(GpuFp8, DeviceConversionMatchesTheHostOnASweep) {
  FATHOM_REQUIRE_GPU();
  // Scale 1 (an amax equal to the format's max): each float converts as it is, NaN and Inf included.
  std::vector<float> xs;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65537) {
    float f;
    const uint32_t bits = uint32_t(u);
    std::memcpy(&f, &bits, 4);
    xs.push_back(f);
  }
  for (DType format : {DType::e4m3, DType::e5m2})
    for (int code = 0; code < 256; ++code) {
      const float v = fp8_to_float(uint8_t(code), format);
      xs.push_back(v);
      xs.push_back(std::nextafter(v, INFINITY));
      xs.push_back(std::nextafter(v, -INFINITY));
      if (code < 255) xs.push_back(0.5f * (v + fp8_to_float(uint8_t(code + 1), format)));
    }
  while (xs.size() % 16) xs.push_back(0.0f);
  const Tensor x = Tensor::from_vector(xs, {int64_t(xs.size()) / 16, 16});
  for (DType format : {DType::e4m3, DType::e5m2}) {
    const Tensor amax = Tensor::from_vector<float>({fp8_max(format)}, {1});
    const Fp8Tensor got = fp8_cast(x.to(kGpu), amax.to(kGpu), format);
    const Fp8Tensor want = fp8_cast(x, amax, format);
    EXPECT_TRUE(same_bytes(got.data, want.data)) << dtype_name(format);
    EXPECT_EQ(got.scale_inv.to(Device::cpu()).to_vector<float>()[0], 1.0f);
  }
}

TEST(GpuFp8, TheGemmReadsEveryFiniteCodeAsTheHostDoes) {
  FATHOM_REQUIRE_GPU();
  // a [16, 16] holds the 256 codes (non-finite ones replaced by 0) times the identity: c = a's values.
  for (DType format : {DType::e4m3, DType::e5m2}) {
    std::vector<float> a_vals(256), ident(256, 0.0f);
    for (int code = 0; code < 256; ++code) {
      const float v = fp8_to_float(uint8_t(code), format);
      a_vals[size_t(code)] = std::isfinite(v) ? v : 0.0f;
    }
    for (int i = 0; i < 16; ++i) ident[size_t(i * 16 + i)] = 1.0f;
    const Tensor a = Tensor::from_vector(a_vals, {16, 16}).to(format).to(kGpu);
    const Tensor b = Tensor::from_vector(ident, {16, 16}).to(DType::e4m3).to(kGpu);
    const Tensor one = Tensor::from_vector<float>({1.0f}, {1}).to(kGpu);
    Tensor c = Tensor::empty({16, 16}, DType::f32, kGpu);
    fp8_matmul(a, one, b, one, c);
    EXPECT_EQ(c.to(Device::cpu()).to_vector<float>(), a_vals) << dtype_name(format);
  }
}

TEST(GpuFp8, AmaxMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1, 1}, Shape{37, 24}, Shape{1000, 77}, Shape{4097, 128}, Shape{3, 100003}})
    for (DType dt : {DType::f32, DType::bf16}) {
      const GpuInput x = random_input(shape, dt, 11, -3, 3);
      EXPECT_TRUE(same_bytes(fp8_amax(x.gpu), fp8_amax(x.cpu))) << shape.str() << " " << dtype_name(dt);
    }
  EXPECT_EQ(fp8_amax(Tensor::zeros({0, 16}, DType::f32, kGpu)).to(Device::cpu()).to_vector<float>()[0], 0.0f);
  EXPECT_EQ(fp8_amax(Tensor::zeros({513, 16}, DType::bf16, kGpu)).to(Device::cpu()).to_vector<float>()[0], 0.0f);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    Tensor x = random_tensor({1000, 33}, DType::f32, 2);
    x.data<float>()[777] = bad;
    const float amax = fp8_amax(x.to(kGpu)).to(Device::cpu()).to_vector<float>()[0];
    if (std::isnan(bad))
      EXPECT_TRUE(std::isnan(amax));
    else
      EXPECT_EQ(amax, INFINITY);
  }
}

// A width that is a multiple of 8 in a tensor that starts 8 bytes into its storage (so not 16-byte aligned)
// takes the element-at-a-time cast-transpose, with the same bytes as the CPU.
TEST(GpuFp8, CastTransposeOfAnUnalignedTensorFallsBackWithTheSameBytes) {
  FATHOM_REQUIRE_GPU();
  const int64_t rows = 45, cols = 64;
  const Tensor flat = awkward_values(1, rows * cols + 4, 8).to(DType::bf16).view({rows * cols + 4});
  const Tensor host = flat.narrow(4, rows * cols).view({rows, cols});
  const Tensor gpu = flat.to(kGpu).narrow(4, rows * cols).view({rows, cols});
  const Tensor amax = fp8_amax(host);
  const Fp8Tensor want = fp8_cast_transpose(host, amax, DType::e4m3);
  const Fp8Tensor got = fp8_cast_transpose(gpu, amax.to(kGpu), DType::e4m3);
  EXPECT_TRUE(same_bytes(got.data, want.data));
  EXPECT_TRUE(same_bytes(got.transposed, want.transposed));
}

// The packed kernels (16-byte loads, several per thread) against the element-at-a-time ones: the largest
// |x| in the tail past the last whole pack, at the first element, and in a view whose start is not
// 16-byte aligned (a row of 3 bf16), which takes the unpacked path.
TEST(GpuFp8, AmaxFindsTheMaxInTheTailAtTheStartAndInUnalignedViews) {
  FATHOM_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16})
    // the last: more packs than one wave of blocks loads at once, so each thread goes round several times
    for (int64_t n : {int64_t(8 * 4 * 512 * 3 + 5), int64_t(1) << 20, (int64_t(1) << 24) + 5}) {
      for (int64_t at : {n - 1, int64_t(0), n / 2 + 3}) {
        Tensor x = random_tensor({n, 1}, DType::f32, 5, -1, 1);
        x.data<float>()[at] = -300.0f;
        const Tensor got = fp8_amax(x.to(dt).to(kGpu));
        EXPECT_EQ(got.to(Device::cpu()).to_vector<float>()[0], 300.0f) << dtype_name(dt) << " n " << n << " at " << at;
      }
    }
  const Tensor x = random_tensor({4001, 3}, DType::f32, 6, -2, 2).to(DType::bf16);
  const Tensor gpu = x.to(kGpu);
  for (int64_t start : {1, 2, 5}) {
    const Tensor view = gpu.narrow(start, 4001 - start);  // starts 6, 12 or 30 bytes in
    EXPECT_TRUE(same_bytes(fp8_amax(view), fp8_amax(x.narrow(start, 4001 - start)))) << "offset row " << start;
    const Tensor amax = fp8_amax(x.narrow(start, 4001 - start));
    EXPECT_TRUE(same_bytes(fp8_cast(view, amax.to(kGpu), DType::e4m3).data,
                           fp8_cast(x.narrow(start, 4001 - start), amax, DType::e4m3).data))
        << "offset row " << start;
  }
}

TEST(GpuFp8, CastAndCastTransposeMatchTheCpuBitForBit) {
  FATHOM_REQUIRE_GPU();
  // Widths that are multiples of 8 take the packed cast-transpose (128 x 64 tiles): partial tiles in both
  // directions ({130, 200}, {37, 24}), more than one tile of rows ({1000, 768}, {4099, 64}); the others
  // ({33, 5}, {100, 100}) the element-at-a-time one.
  const Shape shapes[] = {{1, 16},    {15, 16},   {17, 48},    {37, 24},   {33, 5}, {100, 100},
                          {130, 200}, {257, 136}, {1000, 768}, {4099, 64}, {0, 32}};
  for (DType format : {DType::e4m3, DType::e5m2})
    for (DType dt : {DType::f32, DType::bf16})
      for (const Shape& shape : shapes) {
        const std::string what = std::string(dtype_name(format)) + " from " + dtype_name(dt) + shape.str();
        const Tensor host = awkward_values(shape[0], shape[1], 3).to(dt).to(DType::f32);  // exact in dt
        const Tensor gpu = host.to(dt).to(kGpu);
        const Tensor amax = fp8_amax(host);
        const Fp8Tensor want = fp8_cast_transpose(host, amax, format);
        const Fp8Tensor got = fp8_cast_transpose(gpu, amax.to(kGpu), format);
        EXPECT_TRUE(same_bytes(got.data, want.data)) << what;
        EXPECT_TRUE(same_bytes(got.transposed, want.transposed)) << what << " (transpose, padding included)";
        EXPECT_TRUE(same_bytes(got.scale_inv, want.scale_inv)) << what;
        EXPECT_TRUE(same_bytes(fp8_cast(gpu, amax.to(kGpu), format).data, want.data)) << what << " (cast alone)";
        const Fp8Tensor only_t = fp8_cast_transpose(gpu, amax.to(kGpu), format, false);
        EXPECT_TRUE(same_bytes(only_t.transposed, want.transposed)) << what;
      }
}

TEST(GpuFp8, AllZeroAndNonFiniteTensors) {
  FATHOM_REQUIRE_GPU();
  const Tensor zeros = Tensor::zeros({45, 32}, DType::bf16, kGpu);
  const Fp8Tensor z = fp8_quantize(zeros, DType::e4m3, true);
  EXPECT_EQ(z.scale_inv.to(Device::cpu()).to_vector<float>()[0], 1.0f);
  EXPECT_EQ(z.transposed.shape(), Shape({32, 48}));
  EXPECT_TRUE(all_zero_bytes(z.data));
  EXPECT_TRUE(all_zero_bytes(z.transposed));
  for (float bad : {NAN, INFINITY}) {
    Tensor x = random_tensor({37, 16}, DType::f32, 4);
    x.data<float>()[100] = bad;
    const Fp8Tensor got = fp8_quantize(x.to(kGpu), DType::e5m2, true);
    const Fp8Tensor want = fp8_quantize(x, DType::e5m2, true);
    EXPECT_TRUE(same_bytes(got.data, want.data)) << bad;
    EXPECT_TRUE(same_bytes(got.transposed, want.transposed)) << bad;
    EXPECT_TRUE(std::isnan(got.scale_inv.to(Device::cpu()).to_vector<float>()[0])) << bad;
  }
}

TEST(GpuFp8, GemmMatchesTheCpuEmulation) {
  FATHOM_REQUIRE_GPU();
  struct Case {
    int64_t m, n, k;
    DType fa, fb;
  };
  const Case cases[] = {{37, 48, 64, DType::e4m3, DType::e4m3}, {1000, 512, 256, DType::e4m3, DType::e4m3},
                        {33, 64, 32, DType::e5m2, DType::e4m3}, {768, 256, 1008, DType::e4m3, DType::e5m2},
                        {1, 16, 16, DType::e4m3, DType::e4m3},  {4096, 2048, 512, DType::e5m2, DType::e4m3}};
  for (const Case& t : cases)
    for (DType out : {DType::f32, DType::bf16})
      for (bool fast : {false, true}) {
        const std::string what = std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k) + " " +
                                 dtype_name(t.fa) + "*" + dtype_name(t.fb) + " -> " + dtype_name(out) +
                                 (fast ? " fast" : "");
        const Fp8Tensor a = fp8_quantize(random_tensor({t.m, t.k}, DType::f32, 5, -2, 2), t.fa, false);
        const Fp8Tensor b = fp8_quantize(random_tensor({t.n, t.k}, DType::f32, 6, -0.05, 0.05), t.fb, false);
        Tensor want = Tensor::empty({t.m, t.n}, DType::f32);
        fp8_matmul(a.data, a.scale_inv, b.data, b.scale_inv, want);
        Tensor got = Tensor::empty({t.m, t.n}, out, kGpu);
        fp8_matmul(a.data.to(kGpu), a.scale_inv.to(kGpu), b.data.to(kGpu), b.scale_inv.to(kGpu), got,
                   {.fast_accumulation = fast});
        // The products are exact in f32; the accumulation differs. Hopper's FP8 MMA keeps fewer mantissa bits
        // than f32 in its accumulator between cuBLASLt's promotions to f32: measured on the H200, 1.08e-4 at
        // 1000x512x256 (the other shapes under 1e-4), against about 1e-6 for an f32 accumulation order.
        const double tolerance = out == DType::bf16 ? 1e-2 : (fast ? 2e-3 : 3e-4);
        EXPECT_LE(relative_l2(got, want), tolerance) << what;
        if (out == DType::f32 && !fast) {  // accumulating into an F32 output: the weight gradient's case
          fp8_matmul(a.data.to(kGpu), a.scale_inv.to(kGpu), b.data.to(kGpu), b.scale_inv.to(kGpu), got,
                     {.accumulate = true});
          fp8_matmul(a.data, a.scale_inv, b.data, b.scale_inv, want, {.accumulate = true});
          EXPECT_LE(relative_l2(got, want), tolerance) << what << " accumulated";
        }
      }
}

TEST(GpuFp8, GemmShapeErrorsNameTheRule) {
  FATHOM_REQUIRE_GPU();
  const Tensor one = Tensor::from_vector<float>({1.0f}, {1}).to(kGpu);
  Tensor a8 = Tensor::empty({4, 24}, DType::e4m3, kGpu), b8 = Tensor::empty({16, 24}, DType::e4m3, kGpu);
  a8.zero_();
  b8.zero_();
  Tensor c = Tensor::empty({4, 16}, DType::f32, kGpu);
  expect_error([&] { fp8_matmul(a8, one, b8, one, c); }, {"multiples of 16", "24"});
}

TEST(GpuFp8, HopperPassesTheDeviceCheck) {
  FATHOM_REQUIRE_GPU();
  const cudaDeviceProp& p = cuda::device_properties(0);
  if (p.major * 10 + p.minor >= 89)
    EXPECT_NO_THROW(check_fp8_device(kGpu));
  else
    expect_error([&] { check_fp8_device(kGpu); }, {"compute capability 8.9", "cuda:0", "train.precision: bf16"});
}
