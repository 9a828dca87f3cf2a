// The decode prologue's host side: the CPU entry is the separate ops (QK-norm, RoPE, the cache writes)
// on every sequence's own position, its arguments are checked with messages that name the problem, and
// the FATHOM_DECODE_PROLOGUE choice parses its two words; decode_prologue_attention is the prologue, then
// attention, under either FATHOM_PROLOGUE_IN_ATTENTION choice. The CUDA kernel is tested in
// test_gpu_decode_prologue.cpp; attention's use of it in tests/train/test_decode_step.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_prologue.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(DecodePrologue, CpuEntryIsTheSeparateOpsAtEachSequencesPosition) {
  const int64_t B = 3, Hq = 6, Hk = 2, d = 8, capacity = 9;
  const Tensor q = random_tensor({B, 1, Hq, d}, DType::f32, 1), k = random_tensor({B, 1, Hk, d}, DType::f32, 2),
               v = random_tensor({B, 1, Hk, d}, DType::f32, 3);
  const Tensor q_norm = random_tensor({Hq * d}, DType::f32, 4), k_norm = random_tensor({Hk * d}, DType::f32, 5);
  const Tensor past = Tensor::from_vector<int32_t>({4, 0, 7}, {B});
  const Tensor angles = rope_angles(positions_after(past, 1), d, 10000.0);
  for (const bool qk_norm : {true, false}) {
    Tensor cache_k = random_tensor({B, Hk, capacity, d}, DType::f32, 6), cache_v = cache_k.clone();
    Tensor want_k = cache_k.clone(), want_v = cache_v.clone();
    const QkNorm norm = qk_norm ? QkNorm{q_norm, k_norm, 1e-6, 1e-6} : QkNorm{};
    const Tensor got = decode_prologue(q, k, v, norm, angles, cache_k, cache_v, past);
    const auto normed = [&](const Tensor& x, const Tensor& w) {
      return qk_norm ? rms_norm_forward(x.view({B, x.dim(2) * d}), w, 1e-6).y.view(x.shape()) : x;
    };
    kv_cache_write(want_k, rope_forward(normed(k, k_norm), angles), past);
    kv_cache_write(want_v, v, past);
    EXPECT_EQ(got.to_vector<float>(), rope_forward(normed(q, q_norm), angles).to_vector<float>());
    EXPECT_EQ(cache_k.to_vector<float>(), want_k.to_vector<float>());
    EXPECT_EQ(cache_v.to_vector<float>(), want_v.to_vector<float>());
  }
}

TEST(DecodePrologue, BadArgumentsNameTheProblem) {
  const Tensor q = Tensor::zeros({2, 1, 4, 8}, DType::f32), k = Tensor::zeros({2, 1, 2, 8}, DType::f32);
  const Tensor past = Tensor::zeros({2}, DType::i32);
  const Tensor angles = rope_angles(positions_after(past, 1), 8, 1e4);
  Tensor cache = Tensor::zeros({2, 2, 5, 8}, DType::f32), other = cache.clone();
  const auto call = [&](const Tensor& q_, const Tensor& k_, const Tensor& qn, const Tensor& kn, const Tensor& a,
                        Tensor& ck, const Tensor& p) {
    decode_prologue(q_, k_, k_, QkNorm{qn, kn, 1e-6, 1e-6}, a, ck, other, p);
  };
  expect_error(
      [&] {
        call(Tensor::zeros({2, 3, 4, 8}, DType::f32), k, {}, {}, angles, cache, past);
      },
      {"q must be [B, 1, Hq, d]", "one new token"});
  expect_error(
      [&] {
        call(q, Tensor::zeros({2, 1, 2, 6}, DType::f32), {}, {}, angles, cache, past);
      },
      {"k must be [B, 1, H, d] = [2, 1, H, 8]"});
  expect_error([&] { call(q, k.to(DType::f64), {}, {}, angles, cache, past); }, {"must have q's dtype"});
  expect_error([&] { call(q, k, Tensor::zeros({32}, DType::f32), {}, angles, cache, past); },
               {"q_norm and k_norm come together"});
  expect_error(
      [&] { call(q, k, Tensor::zeros({31}, DType::f32), Tensor::zeros({16}, DType::f32), angles, cache, past); },
      {"q_norm must be [Hq d] = [32]"});
  expect_error([&] { call(q, k, {}, {}, rope_angles(positions_after(past, 1), 6, 1e4), cache, past); },
               {"angles must be rope_angles'", "[2, 1, 4, 2]"});
  Tensor narrow_cache = Tensor::zeros({2, 3, 5, 8}, DType::f32);
  expect_error([&] { call(q, k, {}, {}, angles, narrow_cache, past); },
               {"the caches must be [B, Hk, capacity, d] = [2, 2, capacity, 8]"});
  expect_error([&] { call(q, k, {}, {}, angles, cache, Tensor::zeros({3}, DType::i32)); },
               {"decode_prologue", "3 position counts for a batch of 2"});
  expect_error([&] { call(q, k, {}, {}, angles.to(DType::f32), cache, past); }, {"not rope_angles' table for cpu"});
  expect_error(
      [&] {
        call(Tensor::zeros({2, 1, 0, 8}, DType::f32), k, {}, {}, angles, cache, past);
      },
      {"q must be [B, 1, Hq, d] with heads"});
  const Tensor qn = Tensor::zeros({32}, DType::f32), kn = Tensor::zeros({16}, DType::f32);
  expect_error(
      [&] {
        decode_prologue(q, k, k, QkNorm{qn, kn, 1e-6, 0.0}, angles, cache, other, past);
      },
      {"eps must be positive"});
}

TEST(DecodePrologue, ChoiceParsesItsTwoWordsAndNamesTheVariableOtherwise) {
  EXPECT_EQ(parse_fusion("fused", "X"), DecodePrologue::fused);
  EXPECT_EQ(parse_fusion("separate", "X"), DecodePrologue::separate);
  expect_error([] { parse_fusion("on", "FATHOM_DECODE_PROLOGUE"); },
               {"FATHOM_DECODE_PROLOGUE must be fused or separate", "'on'"});
}

TEST(DecodePrologue, WithAttentionIsThePrologueThenAttentionUnderEitherChoice) {
  const int64_t B = 3, Hq = 6, Hk = 2, d = 8, capacity = 9;
  const Tensor q = random_tensor({B, 1, Hq, d}, DType::f32, 11), k = random_tensor({B, 1, Hk, d}, DType::f32, 12),
               v = random_tensor({B, 1, Hk, d}, DType::f32, 13);
  const QkNorm norm{random_tensor({Hq * d}, DType::f32, 14), random_tensor({Hk * d}, DType::f32, 15), 1e-6, 1e-5};
  const Tensor past = Tensor::from_vector<int32_t>({4, 0, 7}, {B});
  const Tensor angles = rope_angles(positions_after(past, 1), d, 10000.0);
  const Tensor cache = random_tensor({B, Hk, capacity, d}, DType::f32, 16);
  Tensor want_k = cache.clone(), want_v = cache.clone();
  const Tensor want =
      decode_attention(decode_prologue(q, k, v, norm, angles, want_k, want_v, past), want_k, want_v, past, {}, 0.35);
  for (const Fusion choice : {Fusion::separate, Fusion::fused}) {
    PrologueInAttentionScope scope(choice);
    Tensor cache_k = cache.clone(), cache_v = cache.clone();
    const Tensor got = decode_prologue_attention(q, k, v, norm, angles, cache_k, cache_v, past, 0.35);
    EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
    EXPECT_EQ(cache_k.to_vector<float>(), want_k.to_vector<float>());
    EXPECT_EQ(cache_v.to_vector<float>(), want_v.to_vector<float>());
  }
}

TEST(DecodePrologue, WithAttentionChecksItsHeadsAndScale) {
  const Tensor q = Tensor::zeros({1, 1, 3, 8}, DType::f32), k = Tensor::zeros({1, 1, 2, 8}, DType::f32);
  const Tensor past = Tensor::zeros({1}, DType::i32);
  const Tensor angles = rope_angles(positions_after(past, 1), 8, 1e4);
  Tensor cache_k = Tensor::zeros({1, 2, 4, 8}, DType::f32), cache_v = cache_k.clone();
  expect_error([&] { decode_prologue_attention(q, k, k, {}, angles, cache_k, cache_v, past, 1.0); },
               {"decode_prologue_attention", "Hq = 3 must be a multiple of KV heads Hk = 2"});
  const Tensor q4 = Tensor::zeros({1, 1, 4, 8}, DType::f32);
  expect_error([&] { decode_prologue_attention(q4, k, k, {}, angles, cache_k, cache_v, past, 0.0); },
               {"scale must be finite and non-zero"});
  Tensor empty_k = Tensor::zeros({1, 2, 0, 8}, DType::f32), empty_v = empty_k.clone();
  expect_error([&] { decode_prologue_attention(q4, k, k, {}, angles, empty_k, empty_v, past, 1.0); },
               {"must hold a batch and at least one position"});
  expect_error(
      [&] { decode_prologue_attention(q4, k, k, {}, angles, cache_k, cache_v, Tensor::zeros({2}, DType::i32), 1.0); },
      {"2 position counts for a batch of 1"});
}

TEST(DecodePrologue, FitsAttentionWhereTheSplitKernelTakesIt) {
  const auto fits = [](int64_t Hq, int64_t Hk, int64_t d, DType dtype) {
    const Tensor q = Tensor::zeros({2, 1, Hq, d}, dtype), k = Tensor::zeros({2, 1, Hk, d}, dtype);
    const Tensor cache = Tensor::zeros({2, Hk, 8, d}, dtype);
    const QkNorm norm{Tensor::zeros({Hq * d}, dtype), Tensor::zeros({Hk * d}, dtype), 1e-6, 1e-6};
    return prologue_fits_attention(q, k, k, norm, cache, cache);
  };
  EXPECT_TRUE(fits(16, 16, 128, DType::bf16));  // the 1B OLMo2
  EXPECT_TRUE(fits(32, 8, 64, DType::bf16));    // the Llama 3.2 1B shape, G = 4
  EXPECT_FALSE(fits(16, 2, 64, DType::bf16));   // G = 8: the tile kernel's rows
  EXPECT_FALSE(fits(6, 2, 8, DType::bf16));     // head dim 8
  EXPECT_FALSE(fits(16, 16, 128, DType::f32));  // the fp32 kernel
}
