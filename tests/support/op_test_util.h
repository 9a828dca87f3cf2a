// Helpers shared by the op tests: seeded random inputs, comparisons against plain double-precision
// formulas, and checks that bad input raises a fathom::Error with a useful message.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/random.h"
#include "core/tensor.h"
#include "tests/support/test_support.h"

namespace fathom::test {

// Uniform in [low, high), from Philox with the given seed.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen{seed, 0};
  fill_uniform(t, gen, low, high);
  return t.to(dtype);
}

// Token ids (I32) in [0, vocab) from a 32-bit LCG seeded with `seed`: the inputs the model tests use.
inline Tensor lcg_token_ids(const Shape& shape, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> ids(size_t(shape.numel()));
  uint32_t x = seed;
  for (int32_t& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = int32_t((x >> 8) % uint32_t(vocab));
  }
  return Tensor::from_vector(ids, shape);
}

// Integers uniform in [0, bound).
inline Tensor random_ints(const Shape& shape, int64_t bound, uint64_t seed, DType dtype = DType::i64) {
  std::vector<int64_t> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(philox::draw(seed, i, 0).v[0] % uint32_t(bound));
  Tensor t = Tensor::from_vector(v, shape);
  if (dtype == DType::i64) return t;
  std::vector<int32_t> v32(v.begin(), v.end());
  return Tensor::from_vector(v32, shape);
}

// Any floating tensor's values as doubles.
inline std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

// Every element of `got` is within atol + rtol * |want| of `want`.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double atol, double rtol,
                         const std::string& what = "") {
  const std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = std::abs(g[i] - want[i]) <= atol + rtol * std::abs(want[i]);
    if (!ok && reported++ < 5) ADD_FAILURE() << what << " element " << i << ": got " << g[i] << ", want " << want[i];
  }
}
inline void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                         const std::string& what = "") {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_close(got, values(want), atol, rtol, what);
}

using fathom::testing::expect_error;

}  // namespace fathom::test
