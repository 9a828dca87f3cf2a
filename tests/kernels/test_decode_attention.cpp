// Decode attention (kernels/attention/decode_attention.h): with the cache holding the first `length` tokens of a
// sequence, the new queries' outputs equal the matching rows of causal attention (and of MoDA
// attention with depth slots) run over those tokens; the unwritten cache tail (NaN) is never read.
// Bad arguments raise errors that name the argument and the shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/moda/moda_attention.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// Tokens [begin, end) of x [B, T, ...] (dim 1), in x's dtype.
Tensor tokens(const Tensor& x, int64_t begin, int64_t end) {
  const int64_t B = x.dim(0), T = x.dim(1), row = x.numel() / (B * T);
  const std::vector<double> v = values(x);
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = begin; t < end; ++t)
      out.insert(out.end(), v.begin() + (b * T + t) * row, v.begin() + (b * T + t + 1) * row);
  Shape shape = x.shape();
  shape[1] = end - begin;
  return Tensor::from_vector(out, shape).to(x.dtype());
}

// The head-major cache [B, Hk, capacity, d] of a sequence x [B, T, Hk, d], positions past T set to NaN.
Tensor to_cache(const Tensor& x, int64_t capacity) {
  const int64_t B = x.dim(0), T = x.dim(1), Hk = x.dim(2), d = x.dim(3);
  const std::vector<double> v = values(x);
  std::vector<double> cache(size_t(B * Hk * capacity * d), NAN);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hk; ++h)
        for (int64_t c = 0; c < d; ++c)
          cache[size_t(((b * Hk + h) * capacity + t) * d + c)] = v[size_t(((b * T + t) * Hk + h) * d + c)];
  return Tensor::from_vector(cache, {B, Hk, capacity, d}).to(x.dtype());
}

struct Sequence {
  Tensor q, k, v, depth_k, depth_v;  // [B, T, Hq | Hk, d]; depth [B, T, S, Hk, d]
};
Sequence random_sequence(int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t d, int64_t S, DType dtype,
                         uint64_t seed) {
  return {random_tensor({B, T, Hq, d}, dtype, seed, -2, 2), random_tensor({B, T, Hk, d}, dtype, seed + 1, -2, 2),
          random_tensor({B, T, Hk, d}, dtype, seed + 2), random_tensor({B, T, S, Hk, d}, dtype, seed + 3, -2, 2),
          random_tensor({B, T, S, Hk, d}, dtype, seed + 4)};
}

double tolerance(DType dtype) { return dtype == DType::f64 ? 1e-12 : 2e-5; }

}  // namespace

// Over prefixes of a sequence (the cache's first `length` tokens), Tq = 1 and 5, G = 1, 3, 4: the
// decode output is the last Tq rows of attention over the prefix. The cache has room to spare.
TEST(DecodeAttention, EqualsLastRowsOfCausalAttention) {
  const int64_t B = 2, T = 11, Hk = 2, d = 8, capacity = T + 5;
  for (DType dtype : {DType::f64, DType::f32})
    for (int64_t G : {1, 3, 4}) {
      const Sequence s = random_sequence(B, T, G * Hk, Hk, d, 1, dtype, 100 + uint64_t(G));
      const Tensor k_cache = to_cache(s.k, capacity), v_cache = to_cache(s.v, capacity);
      const double scale = 1.0 / std::sqrt(double(d));
      for (int64_t Tq : {1, 5})
        for (int64_t length : {Tq, int64_t(7), T}) {
          SCOPED_TRACE("G " + std::to_string(G) + ", Tq " + std::to_string(Tq) + ", length " + std::to_string(length) +
                       ", " + dtype_name(dtype));
          const Tensor want =
              cpu::attention_forward(tokens(s.q, 0, length), tokens(s.k, 0, length), tokens(s.v, 0, length), scale).o;
          const Tensor got = decode_attention(tokens(s.q, length - Tq, length), k_cache, v_cache, length, scale);
          expect_close(got, tokens(want, length - Tq, length), tolerance(dtype), tolerance(dtype), "o");
        }
    }
}

// With depth slots, the decode output is the last Tq rows of MoDA attention: one softmax over the
// visible cache positions and the new token's own slots [1, 4) of 5.
TEST(DecodeAttention, EqualsLastRowsOfModaAttention) {
  const int64_t B = 2, T = 9, Hk = 2, d = 8, S = 5;
  for (DType dtype : {DType::f64, DType::f32})
    for (int64_t G : {1, 3, 4})
      for (int64_t Tq : {1, 5}) {
        SCOPED_TRACE("G " + std::to_string(G) + ", Tq " + std::to_string(Tq) + ", " + dtype_name(dtype));
        const Sequence s = random_sequence(B, T, G * Hk, Hk, d, S, dtype, 200 + uint64_t(G));
        const double scale = 0.3;
        const Tensor want = cpu::moda_attention_forward(s.q, s.k, s.v, DepthSlots{s.depth_k, s.depth_v, 1, 4}, scale).o;
        const DepthSlots depth{tokens(s.depth_k, T - Tq, T), tokens(s.depth_v, T - Tq, T), 1, 4};
        const Tensor got =
            decode_attention(tokens(s.q, T - Tq, T), to_cache(s.k, T + 3), to_cache(s.v, T + 3), T, depth, scale);
        expect_close(got, tokens(want, T - Tq, T), tolerance(dtype), tolerance(dtype), "o");
      }
}

// An empty slot range is plain attention, whatever the depth buffers hold.
TEST(DecodeAttention, EmptySlotRangeIsPlainAttention) {
  const Sequence s = random_sequence(1, 6, 4, 2, 8, 3, DType::f64, 300);
  const Tensor k_cache = to_cache(s.k, 8), v_cache = to_cache(s.v, 8), q = tokens(s.q, 4, 6);
  const Tensor plain = decode_attention(q, k_cache, v_cache, 6, 0.5);
  const Tensor empty =
      decode_attention(q, k_cache, v_cache, 6, DepthSlots{tokens(s.depth_k, 4, 6), tokens(s.depth_v, 4, 6), 2, 2}, 0.5);
  expect_close(empty, plain, 0, 0, "o");
}

TEST(DecodeAttention, BadArgumentsNameTheArgumentAndShapes) {
  const int64_t B = 2, Tq = 3, Hk = 2, d = 8, capacity = 10;
  const Tensor q = random_tensor({B, Tq, 4, d}, DType::f32, 1);
  const Tensor kc = random_tensor({B, Hk, capacity, d}, DType::f32, 2),
               vc = random_tensor({B, Hk, capacity, d}, DType::f32, 3);
  const Tensor dk = random_tensor({B, Tq, 4, Hk, d}, DType::f32, 4),
               dv = random_tensor({B, Tq, 4, Hk, d}, DType::f32, 5);
  expect_error(
      [&] {
        decode_attention(q.view({B, Tq, 4 * d}), kc, vc, 5, 1.0);
      },
      {"q must be [B, Tq, Hq, d]", "F32[2, 3, 32]"});
  expect_error(
      [&] {
        decode_attention(q, kc, vc.view({B, Hk, 5, 2 * d}), 5, 1.0);
      },
      {"k_cache and v_cache must both be [B, Hk, capacity, d]", "F32[2, 2, 5, 16]"});
  expect_error(
      [&] {
        decode_attention(q, random_tensor({B, 3, capacity, d}, DType::f32, 6),
                         random_tensor({B, 3, capacity, d}, DType::f32, 7), 5, 1.0);
      },
      {"Hq = 4 must be a multiple of KV heads Hk = 3"});
  expect_error(
      [&] {
        decode_attention(q, kc.view({1, 2 * Hk, capacity, d}), vc.view({1, 2 * Hk, capacity, d}), 5, 1.0);
      },
      {"disagree on batch or head dim", "F32[1, 4, 10, 8]"});
  expect_error([&] { decode_attention(q, kc, vc, 11, 1.0); }, {"length 11", "capacity = 10"});
  expect_error([&] { decode_attention(q, kc, vc, 2, 1.0); }, {"length 2", "Tq = 3"});
  expect_error([&] { decode_attention(q, kc, vc.to(DType::f64), 5, 1.0); }, {"dtypes differ", "v_cache F64"});
  expect_error([&] { decode_attention(q, kc, vc, 5, NAN); }, {"scale must be finite"});
  expect_error(
      [&] {
        decode_attention(q, kc, vc, 5, DepthSlots{dk, dv, 1, 5}, 1.0);
      },
      {"slot range [1, 5)", "4 slots"});
  expect_error(
      [&] {
        decode_attention(q, kc, vc, 5, DepthSlots{dk, Tensor(), 0, 2}, 1.0);
      },
      {"need both depth.k and depth.v"});
  expect_error(
      [&] {
        decode_attention(q, kc, vc, 5, DepthSlots{dk.view({B, Tq, 4, 1, 2 * d}), dv.view({B, Tq, 4, 1, 2 * d}), 0, 2},
                         1.0);
      },
      {"depth buffer F32[2, 3, 4, 1, 16]", "want [B, Tq, S, Hk, d]"});
  expect_error(
      [&] {
        decode_attention(q, kc, vc, 5, DepthSlots{dk, dv.view({B, Tq, 4, Hk * d}), 0, 2}, 1.0);
      },
      {"depth.k and depth.v must both be [B, Tq, S, Hk, d]"});
  expect_error([&] { decode_attention(q.to(DType::bf16), kc.to(DType::bf16), vc.to(DType::bf16), 5, 1.0); },
               {"decode_attention", "F32 or F64"});
}

// Where the bf16 kernel merges inside its split kernel: the few-rows kernel without depth slots, always, or from
// kMergeInSplitMinSplits splits under auto; never under never.
TEST(DecodeAttention, MergesInSplitOnlyWhereThePolicyAndTheKernelAllow) {
  {
    MergeInSplitScope automatic(Usage::automatic);
    EXPECT_FALSE(merges_in_split(1, false, kMergeInSplitMinSplits - 1));
    EXPECT_TRUE(merges_in_split(1, false, kMergeInSplitMinSplits));
    EXPECT_TRUE(merges_in_split(kDecodeRowsKernelMaxRows, false, 64));
    EXPECT_FALSE(merges_in_split(kDecodeRowsKernelMaxRows + 1, false, 64));  // the tile kernel
    EXPECT_FALSE(merges_in_split(1, true, 64));                              // depth slots
  }
  {
    MergeInSplitScope always(Usage::always);
    EXPECT_TRUE(merges_in_split(2, false, 1));
    EXPECT_FALSE(merges_in_split(5, false, 64));
    EXPECT_FALSE(merges_in_split(1, true, 1));
  }
  MergeInSplitScope never(Usage::never);
  EXPECT_FALSE(merges_in_split(1, false, 64));
}

// Where the bf16 kernel merges in a thread-block cluster: the few-rows kernel without depth slots, at most
// kMergeInClusterMaxSplits splits of at most kMergeInClusterMaxSplitTiles tiles, each of at most as many blocks as
// SMs (split_blocks <= sm_count; 132 here), with the choice on.
TEST(DecodeAttention, MergesInClusterOnlyWhereTheChoiceAndTheKernelAllow) {
  {
    MergeInClusterScope on(Toggle::on);
    const int sms = 132;
    EXPECT_TRUE(merges_in_cluster(1, false, 1, 1, 1, sms));
    EXPECT_TRUE(merges_in_cluster(kDecodeRowsKernelMaxRows, false, kMergeInClusterMaxSplits,
                                  kMergeInClusterMaxSplitTiles, sms, sms));
    EXPECT_FALSE(merges_in_cluster(1, false, kMergeInClusterMaxSplits + 1, 1, 8, sms));
    EXPECT_FALSE(merges_in_cluster(1, false, 2, kMergeInClusterMaxSplitTiles + 1, 8, sms));  // long splits
    EXPECT_FALSE(merges_in_cluster(kDecodeRowsKernelMaxRows + 1, false, 2, 1, 8, sms));      // the tile kernel
    EXPECT_FALSE(merges_in_cluster(1, true, 2, 1, 8, sms));                                  // depth slots
    EXPECT_FALSE(merges_in_cluster(4, false, 3, 1, 32 * 8, sms));  // Llama-3.2-1B's 8 KV heads at batch 32
    EXPECT_TRUE(merges_in_cluster(4, false, 3, 1, 8 * 8, sms));    // and at batch 8
  }
  MergeInClusterScope off(Toggle::off);
  EXPECT_FALSE(merges_in_cluster(1, false, 2, 1, 8, 132));
}
