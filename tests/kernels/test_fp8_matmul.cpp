// The FP8 GEMM's CPU emulation: the dequantized product in f32, accumulation, and the argument errors
// (the GPU tests compare cuBLASLt against it: tests/kernels/test_gpu_fp8.cpp).
#include <gtest/gtest.h>

#include "core/fp8.h"
#include "kernels/fp8/fp8.h"
#include "kernels/matmul/fp8_matmul.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// An FP8 tensor's bytes (its codes).
const uint8_t* codes(const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); }

// What an FP8 tensor stands for: code values times scale_inv, in f64.
std::vector<double> dequantized(const Fp8Tensor& q, const Tensor& data) {
  const double s = q.scale_inv.to_vector<float>()[0];
  std::vector<double> v(size_t(data.numel()));
  for (int64_t i = 0; i < data.numel(); ++i) v[size_t(i)] = fp8_to_float(codes(data)[i], data.dtype()) * s;
  return v;
}

}  // namespace

TEST(Fp8Matmul, IsTheProductOfTheDequantizedOperands) {
  const int64_t m = 37, n = 48, k = 32;
  for (DType fa : {DType::e4m3, DType::e5m2}) {
    const DType fb = DType::e4m3;
    const Fp8Tensor a = fp8_quantize(random_tensor({m, k}, DType::f32, 1, -2, 2), fa, false);
    const Fp8Tensor b = fp8_quantize(random_tensor({n, k}, DType::f32, 2, -0.1, 0.1), fb, false);
    Tensor c = Tensor::empty({m, n}, DType::f32);
    fp8_matmul(a.data, a.scale_inv, b.data, b.scale_inv, c);
    const std::vector<double> av = dequantized(a, a.data), bv = dequantized(b, b.data);
    std::vector<double> want(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[size_t(i * k + p)] * bv[size_t(j * k + p)];
        want[size_t(i * n + j)] = s;
      }
    expect_close(c, want, 1e-5, 1e-5, dtype_name(fa));
    // Accumulating adds the same product again.
    fp8_matmul(a.data, a.scale_inv, b.data, b.scale_inv, c, {.accumulate = true});
    for (double& w : want) w *= 2;
    expect_close(c, want, 2e-5, 2e-5, dtype_name(fa));
  }
}

TEST(Fp8Matmul, BadArgumentsAreErrors) {
  const Fp8Tensor a = fp8_quantize(random_tensor({4, 16}, DType::f32, 1), DType::e5m2, false);
  const Fp8Tensor b = fp8_quantize(random_tensor({8, 16}, DType::f32, 2), DType::e5m2, false);
  const Fp8Tensor w = fp8_quantize(random_tensor({8, 32}, DType::f32, 3), DType::e4m3, false);
  Tensor c = Tensor::empty({4, 8}, DType::f32);
  expect_error([&] { fp8_matmul(a.data, a.scale_inv, b.data, b.scale_inv, c); }, {"both F8_E5M2"});
  expect_error([&] { fp8_matmul(a.data, a.scale_inv, w.data, w.scale_inv, c); }, {"same inner", "a b^T"});
  Tensor wrong = Tensor::empty({4, 9}, DType::f32);
  const Fp8Tensor e4 = fp8_quantize(random_tensor({8, 16}, DType::f32, 2), DType::e4m3, false);
  expect_error([&] { fp8_matmul(a.data, a.scale_inv, e4.data, e4.scale_inv, wrong); }, {"should be [4, 8]"});
  Tensor bf = Tensor::empty({4, 8}, DType::bf16);
  expect_error([&] { fp8_matmul(a.data, a.scale_inv, e4.data, e4.scale_inv, bf); }, {"CPU emulation writes F32"});
  const Tensor f = random_tensor({4, 16}, DType::f32, 5);
  expect_error([&] { fp8_matmul(f, a.scale_inv, e4.data, e4.scale_inv, c); }, {"F8_E4M3 or F8_E5M2", "F32"});
  expect_error([&] { fp8_matmul(a.data, Tensor::zeros({2}, DType::f32), e4.data, e4.scale_inv, c); },
               {"scale_inv must be F32 [1]"});
}
