// The CPU reference of kernels/fp8: amax, the scaled cast and the cast-transpose, on the cases the GPU
// tests also run (tests/kernels/test_gpu_fp8.cpp): awkward shapes, all-zero tensors, the edges of e4m3's
// range, subnormals, NaN and Inf; plus the errors for bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/fp8.h"
#include "kernels/fp8/fp8.h"
#include "kernels/fp8/fp8_scale.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// An FP8 tensor's bytes (its codes).
const uint8_t* codes(const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); }

float amax_of(const Tensor& x) { return fp8_amax(x).to_vector<float>()[0]; }

Tensor f32(std::vector<float> v, Shape shape) { return Tensor::from_vector(v, shape); }

}  // namespace

TEST(Fp8Amax, IsTheLargestMagnitude) {
  EXPECT_EQ(amax_of(f32({1.0f, -3.5f, 2.0f, 0.0f}, {2, 2})), 3.5f);
  EXPECT_EQ(amax_of(Tensor::zeros({7, 5}, DType::f32)), 0.0f);
  EXPECT_EQ(amax_of(Tensor::zeros({0, 5}, DType::f32)), 0.0f);
  EXPECT_EQ(amax_of(f32({-0.0f}, {1})), 0.0f);
  const float denormal = std::ldexp(1.0f, -149);
  EXPECT_EQ(amax_of(f32({denormal, -3 * denormal}, {2})), 3 * denormal);  // float subnormals count
  EXPECT_EQ(amax_of(random_tensor({37, 19}, DType::bf16, 3, -2, 2)),
            amax_of(random_tensor({37, 19}, DType::bf16, 3, -2, 2).to(DType::f32)));
}

TEST(Fp8Amax, NonFiniteInputGivesANonFiniteAmax) {
  EXPECT_TRUE(std::isnan(amax_of(f32({1.0f, NAN, 2.0f}, {3}))));
  EXPECT_TRUE(std::isnan(amax_of(f32({INFINITY, NAN, -INFINITY}, {3})))) << "NaN wins over Inf";
  EXPECT_EQ(amax_of(f32({1.0f, -INFINITY}, {2})), INFINITY);
}

TEST(Fp8Scale, FollowsTheRule) {
  EXPECT_EQ(fp8_scale_from_amax(448.0f, 448.0f), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(2.0f, 448.0f), 224.0f);
  EXPECT_EQ(fp8_scale_from_amax(0.0f, 448.0f), 1.0f) << "an all-zero tensor";
  EXPECT_EQ(fp8_scale_from_amax(1e-45f, 448.0f), FLT_MAX) << "the quotient overflows";
  EXPECT_TRUE(std::isnan(fp8_scale_from_amax(INFINITY, 448.0f)));
  EXPECT_TRUE(std::isnan(fp8_scale_from_amax(NAN, 57344.0f)));
}

TEST(Fp8Cast, MapsTheAmaxToTheFormatsMax) {
  for (DType format : {DType::e4m3, DType::e5m2}) {
    const Tensor x = random_tensor({37, 24}, DType::f32, 5, -3, 3);
    const float amax = amax_of(x);
    const Fp8Tensor q = fp8_cast(x, fp8_amax(x), format);
    ASSERT_EQ(q.data.dtype(), format);
    ASSERT_EQ(q.data.shape(), Shape({37, 24}));
    EXPECT_FALSE(q.transposed.defined());
    const float scale = fp8_max(format) / amax;
    EXPECT_EQ(q.scale_inv.to_vector<float>()[0], 1.0f / scale);
    const std::vector<float> xv = x.to_vector<float>();
    const uint8_t* code = codes(q.data);
    bool saw_max = false;
    for (size_t i = 0; i < xv.size(); ++i) {
      EXPECT_EQ(code[i], float_to_fp8(xv[i] * scale, format)) << i;
      saw_max |= (code[i] & 0x7F) == (format == DType::e4m3 ? 0x7E : 0x7B);
      // Dequantized within half a step: 2^-4 (e4m3) or 2^-3 (e5m2) relative in the normal range.
      const float back = fp8_to_float(code[i], format) / scale;
      if (std::fabs(xv[i]) * scale >= (format == DType::e4m3 ? 0.015625f : 6.1e-5f)) {
        EXPECT_LE(std::fabs(back - xv[i]), std::fabs(xv[i]) * (format == DType::e4m3 ? 0.0625f : 0.125f)) << i;
      }
    }
    EXPECT_TRUE(saw_max) << "the largest |x| lands on the format's max";
  }
}

TEST(Fp8Cast, AllZeroTensorHasScaleOne) {
  const Tensor x = Tensor::zeros({17, 16}, DType::f32);
  const Fp8Tensor q = fp8_cast_transpose(x, fp8_amax(x), DType::e4m3);
  EXPECT_EQ(q.scale_inv.to_vector<float>()[0], 1.0f);
  for (int64_t i = 0; i < q.data.numel(); ++i) EXPECT_EQ(codes(q.data)[i], 0);
  for (int64_t i = 0; i < q.transposed.numel(); ++i) EXPECT_EQ(codes(q.transposed)[i], 0);
}

TEST(Fp8Cast, RangeEdgesAndSubnormals) {
  // amax 448 gives scale 1: each value converts as it is.
  const float tiny = std::ldexp(1.0f, -9);
  const Tensor x = f32({448.0f, -448.0f, 447.0f, tiny, -tiny, tiny / 2, 3 * tiny / 2, 1e-30f}, {1, 8});
  const Fp8Tensor q = fp8_cast(x, fp8_amax(x), DType::e4m3);
  const uint8_t* c = codes(q.data);
  EXPECT_EQ(q.scale_inv.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(c[0], 0x7E);
  EXPECT_EQ(c[1], 0xFE);
  EXPECT_EQ(c[2], 0x7E);  // 447 rounds to 448
  EXPECT_EQ(c[3], 0x01);
  EXPECT_EQ(c[4], 0x81);
  EXPECT_EQ(c[5], 0x00);  // tie with zero: even
  EXPECT_EQ(c[6], 0x02);
  EXPECT_EQ(c[7], 0x00);
  // An amax smaller than the values it bounds (a caller's error) saturates instead of overflowing.
  const Fp8Tensor s = fp8_cast(f32({1000.0f, -1e30f}, {1, 2}), f32({448.0f}, {1}), DType::e4m3);
  EXPECT_EQ(codes(s.data)[0], 0x7E);
  EXPECT_EQ(codes(s.data)[1], 0xFE);
}

TEST(Fp8Cast, NonFiniteInputPoisonsTheWholeTensor) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    const Tensor x = f32({1.0f, bad, 0.0f, -2.0f}, {2, 2});
    const Fp8Tensor q = fp8_cast_transpose(x, fp8_amax(x), DType::e4m3);
    EXPECT_TRUE(std::isnan(q.scale_inv.to_vector<float>()[0])) << bad;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(codes(q.data)[i], 0x7F) << bad << " element " << i;
    for (int c = 0; c < 2; ++c)
      for (int r = 0; r < 2; ++r) EXPECT_EQ(codes(q.transposed)[c * 16 + r], 0x7F) << bad;
  }
}

TEST(Fp8CastTranspose, WritesTheTransposePaddedToSixteenRows) {
  for (const Shape& shape : {Shape{37, 24}, Shape{16, 16}, Shape{1, 48}, Shape{33, 5}, Shape{0, 16}}) {
    const Tensor x = random_tensor(shape, DType::f32, 9);
    const Fp8Tensor q = fp8_cast_transpose(x, fp8_amax(x), DType::e5m2);
    const int64_t rows = shape[0], cols = shape[1], padded = (rows + 15) / 16 * 16;
    ASSERT_EQ(q.transposed.shape(), Shape({cols, padded})) << shape.str();
    const Fp8Tensor plain = fp8_cast(x, fp8_amax(x), DType::e5m2);
    EXPECT_EQ(q.scale_inv.to_vector<float>(), plain.scale_inv.to_vector<float>());
    const uint8_t *d = codes(q.data), *t = codes(q.transposed), *p = codes(plain.data);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        EXPECT_EQ(d[r * cols + c], p[r * cols + c]);
        EXPECT_EQ(t[c * padded + r], d[r * cols + c]);
      }
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = rows; r < padded; ++r) EXPECT_EQ(t[c * padded + r], 0) << "padding";
    const Fp8Tensor only_t = fp8_cast_transpose(x, fp8_amax(x), DType::e5m2, false);
    EXPECT_FALSE(only_t.data.defined());
    EXPECT_EQ(std::memcmp(only_t.transposed.raw(), q.transposed.raw(), q.transposed.nbytes()), 0);
  }
}

TEST(Fp8Quantize, FlattensLeadingDimensions) {
  const Tensor x = random_tensor({2, 3, 32}, DType::f32, 4);
  const Fp8Tensor q = fp8_quantize(x, DType::e4m3, true);
  EXPECT_EQ(q.data.shape(), Shape({6, 32}));
  EXPECT_EQ(q.transposed.shape(), Shape({32, 16}));
}

TEST(Fp8Cast, BadArgumentsAreErrors) {
  const Tensor x = random_tensor({4, 16}, DType::f32, 1);
  const Tensor amax = fp8_amax(x);
  expect_error([&] { fp8_amax(x.to(DType::f64)); }, {"fp8_amax", "F32 or BF16", "F64"});
  expect_error([&] { fp8_cast(x.view({2, 2, 16}), amax, DType::e4m3); }, {"fp8_cast", "2-D"});
  expect_error([&] { fp8_cast(x, amax, DType::bf16); }, {"F8_E4M3 or F8_E5M2", "BF16"});
  expect_error([&] { fp8_cast(x, Tensor::zeros({2}, DType::f32), DType::e4m3); }, {"amax must be F32 [1]"});
  expect_error([&] { fp8_cast_transpose(x, amax.to(DType::f64), DType::e5m2); }, {"fp8_cast_transpose", "amax"});
  expect_error([&] { fp8_quantize(Tensor::zeros({3}, DType::i32), DType::e4m3, false); }, {"F32 or BF16", "I32"});
}

TEST(Fp8Device, TheCpuNeedsNoCheck) { EXPECT_NO_THROW(check_fp8_device(Device::cpu())); }
