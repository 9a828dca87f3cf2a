// The host FP8 conversions (core/fp8.h): every code, the boundaries, ties to even, subnormals, saturation
// and NaN; in a CUDA build also bit for bit against the host path of CUDA's own <cuda_fp8.h> (the GPU
// tests check the device conversion, tests/kernels/test_gpu_fp8.cpp).
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

#ifdef FATHOM_WITH_CUDA
#include <cuda_fp8.h>
#endif

using namespace fathom;

namespace {

bool is_nan_code(uint8_t code, DType format) {
  return format == DType::e4m3 ? (code & 0x7F) == 0x7F : (code & 0x7F) > 0x7C;
}

}  // namespace

TEST(Fp8, EveryCodeRoundTrips) {
  for (DType format : {DType::e4m3, DType::e5m2}) {
    int nans = 0;
    for (int code = 0; code < 256; ++code) {
      const float v = fp8_to_float(uint8_t(code), format);
      if (std::isnan(v)) {
        ++nans;
        EXPECT_TRUE(is_nan_code(uint8_t(code), format)) << dtype_name(format) << " code " << code;
        EXPECT_EQ(float_to_fp8(v, format), 0x7F) << "NaN converts to the canonical NaN";
      } else if (std::isinf(v)) {
        EXPECT_EQ(format, DType::e5m2) << "e4m3 has no infinity";
        EXPECT_EQ(code & 0x7F, 0x7C);
      } else {
        EXPECT_EQ(float_to_fp8(v, format), code) << dtype_name(format) << " value " << v;
      }
    }
    EXPECT_EQ(nans, format == DType::e4m3 ? 2 : 6) << dtype_name(format);
  }
}

TEST(Fp8, KnownValues) {
  EXPECT_EQ(fp8_to_float(0x38, DType::e4m3), 1.0f);
  EXPECT_EQ(fp8_to_float(0x7E, DType::e4m3), 448.0f);
  EXPECT_EQ(fp8_to_float(0xFE, DType::e4m3), -448.0f);
  EXPECT_EQ(fp8_to_float(0x08, DType::e4m3), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_to_float(0x01, DType::e4m3), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_to_float(0x07, DType::e4m3), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_to_float(0x3C, DType::e5m2), 1.0f);
  EXPECT_EQ(fp8_to_float(0x7B, DType::e5m2), 57344.0f);
  EXPECT_EQ(fp8_to_float(0x7C, DType::e5m2), INFINITY);
  EXPECT_EQ(fp8_to_float(0xFC, DType::e5m2), -INFINITY);
  EXPECT_EQ(fp8_to_float(0x04, DType::e5m2), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_to_float(0x01, DType::e5m2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_max(DType::e4m3), 448.0f);
  EXPECT_EQ(fp8_max(DType::e5m2), 57344.0f);
}

TEST(Fp8, SaturatesFiniteOverflowAndInfinity) {
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3.0e38f, INFINITY}) {
    EXPECT_EQ(float_to_fp8(x, DType::e4m3), 0x7E) << x;
    EXPECT_EQ(float_to_fp8(-x, DType::e4m3), 0xFE) << -x;
  }
  for (float x : {57344.0f, 61440.0f, 65536.0f, 1e9f, INFINITY}) {
    EXPECT_EQ(float_to_fp8(x, DType::e5m2), 0x7B) << x;
    EXPECT_EQ(float_to_fp8(-x, DType::e5m2), 0xFB) << -x;
  }
  EXPECT_EQ(float_to_fp8(NAN, DType::e4m3), 0x7F);
  EXPECT_EQ(float_to_fp8(-NAN, DType::e4m3), 0x7F);
  EXPECT_EQ(float_to_fp8(NAN, DType::e5m2), 0x7F);
}

TEST(Fp8, RoundsToNearestEven) {
  // Between 1 (0x38) and 1.125 (0x39) the tie goes to the even code 0x38; between 1.125 and 1.25 (0x3A) to 0x3A.
  EXPECT_EQ(float_to_fp8(1.0625f, DType::e4m3), 0x38);
  EXPECT_EQ(float_to_fp8(1.1875f, DType::e4m3), 0x3A);
  EXPECT_EQ(float_to_fp8(std::nextafter(1.0625f, 2.0f), DType::e4m3), 0x39);
  EXPECT_EQ(float_to_fp8(-1.0625f, DType::e4m3), 0xB8);
  // Every midpoint between two neighbouring finite codes goes to the even one; one ulp off, to the nearer.
  for (DType format : {DType::e4m3, DType::e5m2})
    for (int code = 0; code + 1 < 128; ++code) {
      const float lo = fp8_to_float(uint8_t(code), format), hi = fp8_to_float(uint8_t(code + 1), format);
      if (!std::isfinite(hi) || std::isnan(hi)) continue;
      const float mid = 0.5f * (lo + hi);
      EXPECT_EQ(float_to_fp8(mid, format), code % 2 == 0 ? code : code + 1) << dtype_name(format) << " " << mid;
      EXPECT_EQ(float_to_fp8(std::nextafter(mid, 0.0f), format), code) << dtype_name(format) << " " << mid;
      EXPECT_EQ(float_to_fp8(std::nextafter(mid, INFINITY), format), code + 1) << dtype_name(format) << " " << mid;
    }
}

TEST(Fp8, SubnormalsAndUnderflowKeepTheSign) {
  const float tiny = std::ldexp(1.0f, -9);                // e4m3's smallest subnormal
  EXPECT_EQ(float_to_fp8(tiny / 2, DType::e4m3), 0x00);   // a tie with zero goes to zero
  EXPECT_EQ(float_to_fp8(-tiny / 2, DType::e4m3), 0x80);  // ... keeping the sign
  EXPECT_EQ(float_to_fp8(std::nextafter(tiny / 2, 1.0f), DType::e4m3), 0x01);
  EXPECT_EQ(float_to_fp8(1.5f * tiny, DType::e4m3), 0x02);  // tie between 1 and 2 steps: even
  EXPECT_EQ(float_to_fp8(1e-30f, DType::e4m3), 0x00);
  EXPECT_EQ(float_to_fp8(-1e-45f, DType::e5m2), 0x80);
  EXPECT_EQ(float_to_fp8(7.5f * tiny, DType::e4m3), 0x08);  // rounds up into the smallest normal
  EXPECT_EQ(float_to_fp8(-0.0f, DType::e4m3), 0x80);
  EXPECT_TRUE(std::signbit(fp8_to_float(0x80, DType::e4m3)));
}

TEST(Fp8, ConversionIsMonotonic) {
  for (DType format : {DType::e4m3, DType::e5m2}) {
    float previous = 0;
    for (float x = 0; x < 2 * fp8_max(format); x = x * 1.001f + 1e-7f) {
      const float v = fp8_to_float(float_to_fp8(x, format), format);
      ASSERT_GE(v, previous) << dtype_name(format) << " at " << x;
      // Within half a spacing: 2^-4 relative for e4m3 and 2^-3 for e5m2 in the normal range.
      if (x >= std::ldexp(1.0f, format == DType::e4m3 ? -6 : -14) && x <= fp8_max(format)) {
        ASSERT_LE(std::fabs(v - x), x * (format == DType::e4m3 ? 0.0625f : 0.125f)) << x;
      }
      previous = v;
    }
  }
}

TEST(Fp8, NotAnFp8DtypeIsAnError) {
  EXPECT_THROW(float_to_fp8(1.0f, DType::bf16), Error);
  EXPECT_THROW(fp8_to_float(0, DType::u8), Error);
}

TEST(Fp8, TensorsConvertThroughTheHost) {
  const Tensor x = Tensor::from_vector<float>({1.0f, -448.0f, 500.0f, 0.3f}, {4});
  const Tensor q = x.to(DType::e4m3);
  EXPECT_EQ(q.dtype(), DType::e4m3);
  EXPECT_EQ(q.nbytes(), 4u);
  const std::vector<float> back = q.to(DType::f32).to_vector<float>();
  EXPECT_EQ(back, (std::vector<float>{1.0f, -448.0f, 448.0f, 0.3125f}));
  EXPECT_EQ(dtype_from_name("F8_E5M2"), DType::e5m2);
  EXPECT_FALSE(is_floating(DType::e4m3));
  EXPECT_TRUE(is_fp8(DType::e5m2));
}

#ifdef FATHOM_WITH_CUDA
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Floats worth converting: each code's value, its neighbours one float ulp away, the midpoints to the
// next code and their neighbours, and a stride through every float bit pattern.
std::vector<float> sweep(DType format) {
  std::vector<float> xs;
  for (int code = 0; code < 128; ++code) {
    const float v = fp8_to_float(uint8_t(code), format);
    if (!std::isfinite(v)) continue;
    const float next = code + 1 < 128 ? fp8_to_float(uint8_t(code + 1), format) : INFINITY;
    for (float s : {1.0f, -1.0f}) {
      xs.push_back(s * v);
      xs.push_back(s * std::nextafter(v, 0.0f));
      xs.push_back(s * std::nextafter(v, INFINITY));
      if (std::isfinite(next)) {
        const float mid = 0.5f * (v + next);
        xs.push_back(s * mid);
        xs.push_back(s * std::nextafter(mid, 0.0f));
        xs.push_back(s * std::nextafter(mid, INFINITY));
      }
    }
  }
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 40961) xs.push_back(from_bits(uint32_t(u)));
  for (float x : {INFINITY, -INFINITY, NAN, -NAN, 0.0f, -0.0f, 1e-45f, -1e-45f, 3.0e38f}) xs.push_back(x);
  return xs;
}

}  // namespace

// CUDA's header converts on the host with the same rules as the GPU's cvt.rn.satfinite instruction.
TEST(Fp8, AgreesWithCudaHeaderBitForBit) {
  for (DType format : {DType::e4m3, DType::e5m2}) {
    const __nv_fp8_interpretation_t kind = format == DType::e4m3 ? __NV_E4M3 : __NV_E5M2;
    int64_t checked = 0;
    for (float x : sweep(format)) {
      const uint8_t want = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind);
      ASSERT_EQ(float_to_fp8(x, format), want) << dtype_name(format) << " x = " << x;
      ++checked;
    }
    for (int code = 0; code < 256; ++code) {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(uint8_t(code), kind);
      const float want = __half2float(__half(h));
      const float got = fp8_to_float(uint8_t(code), format);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << code;
      else
        EXPECT_EQ(got, want) << dtype_name(format) << " code " << code;
    }
    EXPECT_GT(checked, 100000);
  }
}
#endif
