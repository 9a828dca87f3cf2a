#include <gtest/gtest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/rope/rope.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
// rotate_half: y = x * cos + [-x2, x1] * sin, angle_i = pos / theta^(2i/d).
std::vector<double> naive_rope(const Tensor& x, const std::vector<int64_t>& pos, bool per_row, double theta) {
  const int64_t B = x.dim(0), T = x.dim(1), H = x.dim(2), d = x.dim(3), half = d / 2;
  const std::vector<double> xv = values(x);
  std::vector<double> y(xv.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double p = double(per_row ? pos[b * T + t] : pos[t]);
          const double angle = p / std::pow(theta, double(2 * i) / double(d));
          const int64_t base = ((b * T + t) * H + h) * d;
          const double x1 = xv[base + i], x2 = xv[base + i + half];
          y[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          y[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
  return y;
}
}  // namespace

TEST(Rope, MatchesNaiveFormulaForSharedAndPerRowPositions) {
  // Small, and large enough (> 1M elements) for the multi-threaded path.
  for (Shape shape : {Shape{2, 9, 3, 10}, Shape{4, 300, 9, 100}})
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = random_tensor(shape, dt, 1);
      Tensor shared = random_ints({shape[1]}, 4096, 2);
      Tensor per_row = random_ints({shape[0], shape[1]}, 4096, 3, DType::i32);
      const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
      expect_close(rope_forward(x, shared, 500000.0), naive_rope(x, shared.to_vector<int64_t>(), false, 500000.0), tol,
                   tol, "shared positions");
      const std::vector<int32_t> p32 = per_row.to_vector<int32_t>();
      expect_close(rope_forward(x, per_row, 10000.0), naive_rope(x, {p32.begin(), p32.end()}, true, 10000.0), tol, tol,
                   "per-row positions");
    }
}

TEST(Rope, HeadDimTwoRotatesByThePosition) {
  // d = 2: inv_freq = 1, so the pair (1, 0) at position p becomes (cos p, sin p).
  Tensor x = Tensor::from_vector<double>({1, 0, 1, 0}, {1, 2, 1, 2});
  Tensor pos = Tensor::from_vector<int64_t>({0, 3}, {2});
  expect_close(rope_forward(x, pos, 10000.0), {1, 0, std::cos(3.0), std::sin(3.0)}, 1e-15, 0);
}

TEST(Rope, BackwardIsTheInverseRotation) {
  Tensor x = random_tensor({2, 5, 2, 8}, DType::f64, 4);
  Tensor pos = random_ints({2, 5}, 100000, 5);
  expect_close(rope_backward(rope_forward(x, pos, 500000.0), pos, 500000.0), x, 1e-12, 0);
}

TEST(Rope, Gradcheck) {
  auto f = [](const std::vector<Variable>& in) {
    return rope(in[0], rope_angles(in[1].value(), in[0].dim(3), 10000.0));
  };
  GradcheckResult per_row =
      gradcheck(f, {random_tensor({2, 7, 3, 6}, DType::f64, 6), random_ints({2, 7}, 50, 7, DType::i32)});
  EXPECT_TRUE(per_row.ok) << per_row.message;
  GradcheckResult shared = gradcheck(f, {random_tensor({2, 7, 3, 6}, DType::f64, 8), random_ints({7}, 50, 9)});
  EXPECT_TRUE(shared.ok) << shared.message;
}

TEST(Rope, F32AgreesWithF64AtLargePositions) {
  // Angles are formed in double, so even positions near 8K stay accurate in f32.
  Tensor x = random_tensor({1, 16, 4, 16}, DType::f64, 10);
  Tensor pos = random_ints({16}, 8192, 11);
  expect_close(rope_forward(x.to(DType::f32), pos, 500000.0), rope_forward(x, pos, 500000.0), 1e-5, 1e-5);
}

TEST(Rope, BadInputsAreErrors) {
  Tensor pos = random_ints({5}, 10, 1);
  expect_error([&] { rope_forward(random_tensor({1, 5, 2, 7}, DType::f32, 2), pos, 1e4); }, {"even", "7"});
  expect_error([&] { rope_forward(random_tensor({1, 6, 2, 8}, DType::f32, 2), pos, 1e4); }, {"positions", "[T] = [6]"});
  expect_error([&] { rope_forward(random_tensor({5, 2, 8}, DType::f32, 2), pos, 1e4); }, {"[B, T, H, d]"});
  expect_error(
      [&] {
        rope_forward(random_tensor({1, 5, 2, 8}, DType::f32, 2), random_tensor({5}, DType::f32, 3), 1e4);
      },
      {"I32 or I64"});
  expect_error([&] { rope_forward(random_tensor({1, 5, 2, 8}, DType::f32, 2), pos, 0.0); }, {"theta"});
  Tensor negative = Tensor::from_vector<int64_t>({0, 1, -2, 3, 4}, {5});
  expect_error([&] { rope_forward(random_tensor({1, 5, 2, 8}, DType::f32, 2), negative, 1e4); }, {"position -2"});
}

TEST(Rope, AnglesHoldCosAndSinOfEachPositionAndFrequency) {
  const Tensor pos = Tensor::from_vector<int32_t>({0, 7, 3, 12, 1, 5}, {2, 3});
  const Tensor angles = rope_angles(pos, 6, 100.0);
  ASSERT_EQ(angles.shape(), (Shape{2, 3, 3, 2}));
  ASSERT_EQ(angles.dtype(), DType::f64);
  const std::vector<double> a = angles.to_vector<double>();
  const std::vector<int32_t> p = pos.to_vector<int32_t>();
  for (size_t e = 0; e < p.size(); ++e)
    for (int i = 0; i < 3; ++i) {
      const double angle = p[e] * std::pow(100.0, -2.0 * i / 6.0);
      EXPECT_NEAR(a[(e * 3 + size_t(i)) * 2], std::cos(angle), 1e-15);
      EXPECT_NEAR(a[(e * 3 + size_t(i)) * 2 + 1], std::sin(angle), 1e-15);
    }
}

// The layers of a forward rotate q and GQA's k (other head counts) by one table, forward and back.
TEST(Rope, OneAnglesTableServesEveryRotation) {
  const Tensor pos = random_ints({2, 5}, 4096, 14, DType::i32);
  const RopeScaling scaling{"llama3", 8.0, 1.0, 4.0, 64};
  const Tensor angles = rope_angles(pos, 8, 10000.0, scaling);
  for (int64_t heads : {4, 1}) {
    const Tensor x = random_tensor({2, 5, heads, 8}, DType::f32, 15);
    EXPECT_EQ(rope_forward(x, angles).to_vector<float>(), rope_forward(x, pos, 10000.0, scaling).to_vector<float>());
    EXPECT_EQ(rope_backward(x, angles).to_vector<float>(), rope_backward(x, pos, 10000.0, scaling).to_vector<float>());
  }
}

TEST(Rope, AnglesThatDoNotFitAreErrors) {
  const Tensor x = random_tensor({2, 5, 3, 8}, DType::f32, 16);
  const Tensor shared = random_ints({5}, 10, 17);
  expect_error([&] { rope_forward(x, rope_angles(shared, 6, 1e4)); }, {"rope", "not for head dim 8"});
  expect_error([&] { rope_forward(x, rope_angles(random_ints({4}, 10, 18), 8, 1e4)); },
               {"rope", "not for the positions", "[T] = [5]"});
  expect_error(
      [&] {
        rope_forward(x, rope_angles(random_ints({3, 5}, 10, 19), 8, 1e4));
      },
      {"not for the positions", "[B, T] = [2, 5]"});
  expect_error([&] { rope_backward(x, rope_angles(shared, 8, 1e4).to(DType::f32)); },
               {"rope_backward", "must be F64 on cpu", "rope_angles"});
  expect_error([&] { rope_forward(x, random_tensor({5, 8}, DType::f64, 20)); }, {"[T, d/2, 2]"});
  expect_error([&] { rope_angles(shared, 7, 1e4); }, {"head dim must be even", "7"});
  expect_error([&] { rope_angles(random_ints({2, 2, 2}, 10, 21), 8, 1e4); }, {"positions must be [T] or [B, T]"});
}

// ---- frequency scaling (Llama 3.1's rule) ----

TEST(RopeScaling, NoneKeepsThePlainFrequencies) {
  const std::vector<double> f = rope_inverse_frequencies(10, 500000.0);
  ASSERT_EQ(f.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f[size_t(i)], std::pow(500000.0, -2.0 * i / 10.0));
}

TEST(RopeScaling, Llama3FrequenciesByHand) {
  // d 8, theta 1e4: inv_freq 1, 0.1, 0.01, 0.001 with wavelengths 6.28, 62.8, 628, 6283. With
  // original context L = 1024, low 1, high 4: wavelengths < 256 are kept, > 1024 divided by the
  // factor 4, and 628 is interpolated with s = (1024 / 628.3 - 1) / (4 - 1) = 0.2099155,
  // f = (1 - s) * 0.01 / 4 + s * 0.01 = 0.0040743665.
  const std::vector<double> f = rope_inverse_frequencies(8, 10000.0, {"llama3", 4.0, 1.0, 4.0, 1024});
  ASSERT_EQ(f.size(), 4u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[1], 0.1);
  EXPECT_NEAR(f[2], 0.004074366543152521, 1e-15);
  EXPECT_DOUBLE_EQ(f[3], 0.00025);
  // Llama 3.1 8B's own settings (theta 500000, d 128, factor 8, L 8192): the highest frequency is
  // kept, the lowest divided by 8.
  const std::vector<double> big = rope_inverse_frequencies(128, 500000.0, {"llama3", 8.0, 1.0, 4.0, 8192});
  EXPECT_EQ(big.front(), 1.0);
  EXPECT_DOUBLE_EQ(big.back(), std::pow(500000.0, -126.0 / 128.0) / 8.0);
}

TEST(RopeScaling, ForwardRotatesByTheScaledFrequencies) {
  // d 2 has one frequency: theta^0 = 1, wavelength 2 pi, which L = 4, low 1, high 1.5 puts above
  // L / low = 4 (fully scaled): the angle is pos / factor.
  const RopeScaling scaling{"llama3", 2.0, 1.0, 1.5, 4};
  Tensor x = Tensor::from_vector<double>({1, 0, 1, 0}, {1, 2, 1, 2});
  Tensor pos = Tensor::from_vector<int64_t>({0, 3}, {2});
  expect_close(rope_forward(x, pos, 10000.0, scaling), {1, 0, std::cos(1.5), std::sin(1.5)}, 1e-15, 0);
  expect_close(rope_backward(rope_forward(x, pos, 10000.0, scaling), pos, 10000.0, scaling), x, 1e-15, 0);
}

TEST(RopeScaling, GradcheckWithLlama3Scaling) {
  const RopeScaling scaling{"llama3", 8.0, 1.0, 4.0, 16};
  auto f = [&](const std::vector<Variable>& in) {
    return rope(in[0], rope_angles(in[1].value(), in[0].dim(3), 10000.0, scaling));
  };
  GradcheckResult r =
      gradcheck(f, {random_tensor({2, 7, 3, 8}, DType::f64, 12), random_ints({2, 7}, 50, 13, DType::i32)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(RopeScaling, BadSpecsAreErrors) {
  Tensor x = random_tensor({1, 3, 1, 4}, DType::f32, 1);
  Tensor pos = random_ints({3}, 10, 2);
  expect_error([&] { rope_forward(x, pos, 1e4, {"yarn"}); }, {"rope_scaling.type", "none, llama3", "'yarn'"});
  expect_error([&] { rope_forward(x, pos, 1e4, {"llama3", 0.0}); }, {"rope_scaling.factor must be positive"});
  expect_error([&] { rope_forward(x, pos, 1e4, {"llama3", 8.0, 0.0}); }, {"low_freq_factor must be positive"});
  expect_error(
      [&] {
        rope_forward(x, pos, 1e4, {"llama3", 8.0, 4.0, 4.0});
      },
      {"high_freq_factor (4) must be greater than low_freq_factor (4)"});
  expect_error(
      [&] {
        rope_forward(x, pos, 1e4, {"llama3", 8.0, 1.0, 4.0, 0});
      },
      {"original_max_position must be at least 1"});
}
