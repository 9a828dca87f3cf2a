// Ragged decoding's per-sequence counts on the CPU (kernels/attention/kv_cache.h, decode_attention.h):
// with past I32 [B], row b's keys go to positions past[b] .. + Tq - 1, its RoPE positions start at
// past[b], and its queries attend over past[b] + Tq positions, each row exactly what the one-count
// overloads give for that row alone; rows of length 0, 1 and capacity - Tq, with and without MoDA depth
// slots, GQA and an odd head dim; positions past a row's length hold NaN and are never read.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/kv_cache.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"

using namespace fathom;
using namespace fathom::test;
using fathom::testing::expect_error;

namespace {

Tensor counts(const std::vector<int32_t>& n) { return Tensor::from_vector(n, {int64_t(n.size())}); }

// A cache [B, Hk, capacity, d] whose row b holds random values up to lengths[b] and NaN after.
Tensor ragged_cache(int64_t B, int64_t Hk, int64_t capacity, int64_t d, const std::vector<int32_t>& lengths,
                    uint64_t seed) {
  Tensor cache = random_tensor({B, Hk, capacity, d}, DType::f32, seed);
  float* p = cache.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hk; ++h)
      for (int64_t j = lengths[size_t(b)]; j < capacity; ++j)
        for (int64_t c = 0; c < d; ++c) p[((b * Hk + h) * capacity + j) * d + c] = NAN;
  return cache;
}

}  // namespace

TEST(DecodeRows, EachRowWritesAtItsOwnCount) {
  const int64_t B = 3, Tq = 2, Hk = 2, capacity = 7, d = 5;
  const Tensor rows = random_tensor({B, Tq, Hk, d}, DType::f32, 4);
  const std::vector<int32_t> past{0, 3, int32_t(capacity - Tq)};
  Tensor ragged = Tensor::zeros({B, Hk, capacity, d}, DType::f32);
  kv_cache_write(ragged, rows, counts(past));
  for (int64_t b = 0; b < B; ++b) {
    Tensor alone = Tensor::zeros({1, Hk, capacity, d}, DType::f32);
    kv_cache_write(alone, rows.narrow(b, 1), past[size_t(b)]);
    EXPECT_EQ(ragged.narrow(b, 1).to_vector<float>(), alone.to_vector<float>()) << "row " << b;
  }
  // One count for every row is the one-count write.
  Tensor shared = Tensor::zeros({B, Hk, capacity, d}, DType::f32),
         by_int = Tensor::zeros({B, Hk, capacity, d}, DType::f32);
  kv_cache_write(shared, rows, counts({4}));
  kv_cache_write(by_int, rows, 4);
  EXPECT_EQ(shared.to_vector<float>(), by_int.to_vector<float>());
  expect_error(
      [&] {
        kv_cache_write(ragged, rows, counts({0, 6, 1}));
      },
      {"row 1", "2 new positions from 6", "capacity of 7"});
}

TEST(DecodeRows, PositionsAndAdvancePerRow) {
  Tensor past = counts({0, 4, 9});
  EXPECT_EQ(positions_after(past, 2).shape(), (Shape{3, 2}));
  EXPECT_EQ(positions_after(past, 2).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 4, 5, 9, 10}));
  EXPECT_EQ(positions_after(counts({6}), 2).shape(), (Shape{2}));  // one count: shared by the batch
  advance_positions(past, 3);
  EXPECT_EQ(past.to_vector<int32_t>(), (std::vector<int32_t>{3, 7, 12}));
}

TEST(DecodeRows, EachRowAttendsOverItsOwnLength) {
  const int64_t Hk = 2, G = 3, d = 5, capacity = 9, S = 3;
  for (const int64_t Tq : {1, 3}) {
    for (const bool with_depth : {false, true}) {
      // Rows holding 0, 1, capacity - Tq and 4 positions before the step.
      const std::vector<int32_t> past{0, 1, int32_t(capacity - Tq), 4};
      const int64_t B = int64_t(past.size());
      std::vector<int32_t> lengths;
      for (int32_t n : past) lengths.push_back(n + int32_t(Tq));
      const Tensor q = random_tensor({B, Tq, Hk * G, d}, DType::f32, 10 + uint64_t(Tq), -2, 2);
      const Tensor k = ragged_cache(B, Hk, capacity, d, lengths, 11);
      const Tensor v = ragged_cache(B, Hk, capacity, d, lengths, 12);
      DepthSlots depth;
      if (with_depth)
        depth = {random_tensor({B, Tq, S, Hk, d}, DType::f32, 13), random_tensor({B, Tq, S, Hk, d}, DType::f32, 14), 1,
                 3};
      const double scale = 0.4;
      const Tensor o = decode_attention(q, k, v, counts(past), depth, scale);
      for (int64_t b = 0; b < B; ++b) {
        const DepthSlots own = with_depth ? DepthSlots{depth.k.narrow(b, 1), depth.v.narrow(b, 1), 1, 3} : DepthSlots{};
        const Tensor alone =
            decode_attention(q.narrow(b, 1), k.narrow(b, 1), v.narrow(b, 1), lengths[size_t(b)], own, scale);
        const std::vector<float> got = o.narrow(b, 1).to_vector<float>(), want = alone.to_vector<float>();
        EXPECT_EQ(got, want) << "Tq " << Tq << " depth " << with_depth << " row " << b;
        for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "row " << b << " read past its length";
      }
    }
  }
}

TEST(DecodeRows, CountsOutsideTheCacheAreErrorsNamingTheRow) {
  const Tensor q = random_tensor({2, 2, 2, 4}, DType::f32, 1);
  const Tensor kv = random_tensor({2, 1, 6, 4}, DType::f32, 2);
  expect_error(
      [&] {
        decode_attention(q, kv, kv, counts({1, 5}), DepthSlots{}, 0.5);
      },
      {"sequence 1 held 5 positions before 2 new ones", "capacity of 6"});
  expect_error(
      [&] {
        decode_attention(q, kv, kv, counts({1, 2, 3}), DepthSlots{}, 0.5);
      },
      {"I32 [1] or I32 [B] = [2]", "I32[3]"});
}
