#include <gtest/gtest.h>

#include <limits>

#include "kernels/matmul/matmul.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
// alpha * op(a) op(b) + beta * c0 by the textbook triple loop.
std::vector<double> naive_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const std::vector<double>& c0,
                               double alpha, double beta) {
  const std::vector<double> av = values(a), bv = values(b);
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1), n = tb ? b.dim(0) : b.dim(1);
  std::vector<double> c(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? av[p * a.dim(1) + i] : av[i * a.dim(1) + p];
        const double y = tb ? bv[j * b.dim(1) + p] : bv[p * b.dim(1) + j];
        s += x * y;
      }
      c[i * n + j] = alpha * s + (beta == 0 ? 0.0 : beta * c0[i * n + j]);
    }
  return c;
}
}  // namespace

TEST(Matmul, AllTransposesMatchNaive) {
  const int64_t m = 37, k = 19, n = 23;
  for (DType dt : {DType::f32, DType::f64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dt, 1);
        Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dt, 2);
        Tensor c = random_tensor({m, n}, dt, 3);
        const std::vector<double> c0 = values(c);
        matmul(a, ta, b, tb, c, 0.75, -0.5);
        const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
        expect_close(c, naive_gemm(a, ta, b, tb, c0, 0.75, -0.5), tol, tol,
                     std::string("ta=") + std::to_string(ta) + " tb=" + std::to_string(tb));
        Tensor fresh = matmul(a, ta, b, tb);
        expect_close(fresh, naive_gemm(a, ta, b, tb, c0, 1.0, 0.0), tol, tol, "allocating form");
      }
}

TEST(Matmul, LargeProductsSplitAcrossThreadsMatchNaive) {
  // Big enough to be split into output slabs: by rows (m >= n) and by columns (n > m), with ragged
  // last slabs, for every transpose combination, accumulating into c (beta = 1).
  const int64_t k = 67;
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{601, 45}, {45, 601}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, DType::f64, 4);
        Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::f64, 5);
        Tensor c = random_tensor({m, n}, DType::f64, 6);
        const std::vector<double> c0 = values(c);
        matmul(a, ta, b, tb, c, -1.25, 1.0);
        expect_close(c, naive_gemm(a, ta, b, tb, c0, -1.25, 1.0), 1e-11, 1e-11,
                     "m=" + std::to_string(m) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      }
}

TEST(Matmul, BetaZeroIgnoresGarbageInOutput) {
  Tensor a = random_tensor({4, 3}, DType::f32, 6);
  Tensor b = random_tensor({3, 5}, DType::f32, 7);
  Tensor c = Tensor::full({4, 5}, std::numeric_limits<double>::quiet_NaN(), DType::f32);
  matmul(a, false, b, false, c, 2.0, 0.0);
  expect_close(c, naive_gemm(a, false, b, false, {}, 2.0, 0.0), 1e-5, 1e-5);
}

TEST(Matmul, F32AgreesWithF64) {
  Tensor a = random_tensor({64, 128}, DType::f64, 8);
  Tensor b = random_tensor({128, 96}, DType::f64, 9);
  expect_close(matmul(a.to(DType::f32), false, b.to(DType::f32), false), matmul(a, false, b, false), 1e-4, 1e-5);
}

TEST(Matmul, BadInputsAreErrors) {
  Tensor a = random_tensor({4, 3}, DType::f32, 1);
  Tensor b = random_tensor({4, 5}, DType::f32, 2);
  expect_error([&] { matmul(a, false, b, false); }, {"inner dimensions differ", "[4, 3]", "[4, 5]"});
  Tensor c = Tensor::empty({4, 4}, DType::f32);
  expect_error([&] { matmul(a, true, b, false, c); }, {"output", "[3, 5]"});
  expect_error([&] { matmul(a, false, b.to(DType::f64), true); }, {"dtypes differ"});
  expect_error([&] { matmul(a.view({12}), false, b, false); }, {"2-D"});
  expect_error([&] { matmul(random_ints({2, 2}, 3, 1), false, random_ints({2, 2}, 3, 2), false); }, {"floating"});
  Tensor sq = random_tensor({4, 4}, DType::f32, 3);
  expect_error([&] { matmul(sq, false, sq, false, sq); }, {"share storage"});
}
