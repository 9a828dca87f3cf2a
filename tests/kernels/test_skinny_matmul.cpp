// The skinny GEMM's host side: its argument checks, the policy that decides when matmul takes it, and
// its CPU entry (the CPU matmul of the f32 values). The kernel itself is tested in test_gpu_skinny_matmul.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/swiglu/swiglu.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

Tensor zeros_bf16(const Shape& shape) { return Tensor::zeros(shape, DType::bf16); }

}  // namespace

TEST(SkinnyMatmul, CpuEntryIsTheCpuMatmulOfTheF32Values) {
  const Tensor x = random_tensor({5, 37}, DType::bf16, 1), w = random_tensor({11, 37}, DType::bf16, 2);
  const Tensor want = matmul(x.to(DType::f32), false, w.to(DType::f32), true);
  expect_close(skinny_matmul(x, w, DType::f32), want, 0, 0);
  // BF16 output: the same sums, rounded once.
  expect_close(skinny_matmul(x, w, DType::bf16), want.to(DType::bf16), 0, 0);
}

TEST(SkinnyMatmul, BadArgumentsNameTheProblem) {
  const Tensor x = zeros_bf16({4, 8}), w = zeros_bf16({6, 8});
  Tensor y = Tensor::empty({4, 6}, DType::f32);
  expect_error([&] { skinny_matmul(x.to(DType::f32), w, y); }, {"x and w must be BF16", "F32[4, 8]"});
  expect_error([&] { skinny_matmul(x, w.to(DType::f32), y); }, {"x and w must be BF16"});
  Tensor y16 = Tensor::empty({4, 6}, DType::f16);
  expect_error([&] { skinny_matmul(x, w, y16); }, {"y must be BF16 or F32", "F16[4, 6]"});
  expect_error([&] { skinny_matmul(x, zeros_bf16({6, 9}), y); }, {"same inner width K", "BF16[4, 8]", "BF16[6, 9]"});
  Tensor wrong = Tensor::empty({4, 5}, DType::f32);
  expect_error([&] { skinny_matmul(x, w, wrong); }, {"y F32[4, 5]", "should be [4, 6]"});
  expect_error([&] { skinny_matmul(x.view({32}), w, y); }, {"must be 2-D"});
  Tensor tall = Tensor::empty({33, 6}, DType::f32);
  expect_error([&] { skinny_matmul(zeros_bf16({33, 8}), w, tall); }, {"33 rows", "more than the 32", "use matmul"});
  Tensor shared = Tensor::empty({4 * 6 + 4 * 8}, DType::bf16);
  Tensor y_in_x = shared.narrow(32, 24).view({4, 6});
  expect_error([&] { skinny_matmul(shared.narrow(0, 32).view({4, 8}), w, y_in_x); }, {"must not share storage"});
  expect_error([&] { skinny_matmul(Tensor(), w, y); }, {"undefined operand"});
}

// FATHOM_SKINNY_SPLIT_K_CTAS reads off, auto or a count of CTAs from 2 to 8; anything else is an error naming the
// variable and the choices, as is a count set() cannot take.
TEST(SkinnyMatmul, SplitKCtasReadOffAutoOrACount) {
  EXPECT_EQ(parse_skinny_split_k_ctas("off", "X"), 1);
  EXPECT_EQ(parse_skinny_split_k_ctas("auto", "X"), kSkinnySplitKAuto);
  EXPECT_EQ(parse_skinny_split_k_ctas("2", "X"), 2);
  EXPECT_EQ(parse_skinny_split_k_ctas("8", "X"), 8);
  for (const std::string bad : {"'1'", "'9'", "'0'", "'-2'", "'3x'", "''", "'on'"})
    expect_error([&] { parse_skinny_split_k_ctas(bad.substr(1, bad.size() - 2), "FATHOM_SKINNY_SPLIT_K_CTAS"); },
                 {"FATHOM_SKINNY_SPLIT_K_CTAS must be off, auto or a count of CTAs from 2 to 8", bad});
  expect_error([] { set_skinny_split_k_ctas(9); }, {"set_skinny_split_k_ctas", "got 9"});
  SkinnySplitKCtasScope scope(3);
  EXPECT_EQ(skinny_split_k_ctas(), 3);
}

// auto splits K only where one CTA a tile leaves at least half the SMs idle: on 132 SMs the 190M's down_proj (48 tiles,
// K 3072) in as many CTAs as leave two an SM and two chunks a warp, not its o_proj (K 768: 24 chunks) nor the 1B's
// (128 tiles); a count is taken as it is, off stays off.
TEST(SkinnyMatmul, SplitKCtasAutoSplitsOnlyWeightsThatLeaveHalfTheSmsIdle) {
  const int sms = 132;
  EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, 768, 768, sms), 1);     // 24 chunks: 1.5 a warp in two CTAs
  EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, 768, 3072, sms), 5);    // 48 x 5 CTAs <= 2 x 132
  EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, 16, 1 << 16, sms), 8);  // at most 8
  EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, 16, 64, sms), 1);       // 2 chunks: nothing to share
  EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, 16, 1536, sms), 3);     // 48 chunks: two a warp of 3 CTAs
  EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, 1056, 4096, sms), 4);   // 66 tiles: half the SMs idle
  for (const int64_t n : {1057, 2048})
    for (const int64_t k : {2048, 8192}) EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, n, k, sms), 1) << n;
  EXPECT_EQ(skinny_split_k_ctas_for(kSkinnySplitKAuto, 2048, 2048, 264), 4);  // on twice the SMs, half idle again
  EXPECT_EQ(skinny_split_k_ctas_for(4, 2048, 8192, sms), 4);
  EXPECT_EQ(skinny_split_k_ctas_for(1, 768, 3072, sms), 1);
}

// auto asks L2 for a launch's first step of W where rows are short or K is split across a cluster's CTAs: every
// OLMo2 190M launch (K 768; down_proj's K 3072 in 5 CTAs), no 1B or Llama-3.2-1B launch (K 2048 and 8192, unsplit);
// always and never are taken as they are.
TEST(SkinnyMatmul, L2PrefetchAutoAsksOnlyForShortRowsOrSplitK) {
  EXPECT_TRUE(skinny_prefetches(Usage::automatic, 768, 1));
  EXPECT_TRUE(skinny_prefetches(Usage::automatic, 3072, 5));
  EXPECT_TRUE(skinny_prefetches(Usage::automatic, kSkinnyPrefetchBelowK - 1, 1));
  for (const int64_t k : {kSkinnyPrefetchBelowK, int64_t(8192)})
    EXPECT_FALSE(skinny_prefetches(Usage::automatic, k, 1)) << k;
  EXPECT_TRUE(skinny_prefetches(Usage::always, 8192, 1));
  EXPECT_FALSE(skinny_prefetches(Usage::never, 768, 5));
  SkinnyL2PrefetchScope scope(Usage::never);
  EXPECT_EQ(skinny_l2_prefetch(), Usage::never);
}

TEST(SkinnyMatmul, MatmulTakesItForFewRowBf16XTimesWTransposedOnly) {
  const Tensor w = zeros_bf16({6, 8});
  const Tensor y_bf16 = zeros_bf16({4, 6}), y_f32 = Tensor::zeros({4, 6}, DType::f32);
  const auto takes = [&](const Tensor& x, bool ta, const Tensor& b, bool tb, const Tensor& c, double alpha = 1.0,
                         double beta = 0.0) { return use_skinny_matmul(x, ta, b, tb, c, alpha, beta); };
  {
    SkinnyPolicyScope scope(SkinnyMatmulPolicy::automatic);
    EXPECT_TRUE(takes(zeros_bf16({4, 8}), false, w, true, y_bf16));
    EXPECT_TRUE(takes(zeros_bf16({4, 8}), false, w, true, y_f32));  // linear_wide's F32 output
    EXPECT_TRUE(takes(zeros_bf16({kSkinnyMatmulAutoRows, 8}), false, w, true, zeros_bf16({kSkinnyMatmulAutoRows, 6})));
    EXPECT_FALSE(
        takes(zeros_bf16({kSkinnyMatmulAutoRows + 1, 8}), false, w, true, zeros_bf16({kSkinnyMatmulAutoRows + 1, 6})));
    EXPECT_FALSE(takes(zeros_bf16({8, 4}), true, w, true, y_bf16));  // x^T
    EXPECT_FALSE(
        takes(zeros_bf16({4, 6}), false, zeros_bf16({6, 8}), false, zeros_bf16({4, 8})));  // x W (a backward's dX)
    EXPECT_FALSE(takes(zeros_bf16({4, 8}), false, w, true, y_bf16, 0.5));                  // alpha
    EXPECT_FALSE(takes(zeros_bf16({4, 8}), false, w, true, y_f32, 1.0, 1.0));              // accumulation
    const Tensor f32x = Tensor::zeros({4, 8}, DType::f32), f32w = Tensor::zeros({6, 8}, DType::f32);
    EXPECT_FALSE(takes(f32x, false, f32w, true, y_f32));  // F32 operands stay on cuBLASLt
    const Tensor f16x = Tensor::zeros({4, 8}, DType::f16), f16w = Tensor::zeros({6, 8}, DType::f16);
    EXPECT_FALSE(takes(f16x, false, f16w, true, Tensor::zeros({4, 6}, DType::f16)));
  }
  {
    SkinnyPolicyScope scope(SkinnyMatmulPolicy::never);
    EXPECT_FALSE(takes(zeros_bf16({1, 8}), false, w, true, zeros_bf16({1, 6})));
  }
  {
    SkinnyPolicyScope scope(SkinnyMatmulPolicy::always);
    EXPECT_TRUE(takes(zeros_bf16({kSkinnyMatmulMaxRows, 8}), false, w, true, zeros_bf16({kSkinnyMatmulMaxRows, 6})));
    EXPECT_FALSE(
        takes(zeros_bf16({kSkinnyMatmulMaxRows + 1, 8}), false, w, true, zeros_bf16({kSkinnyMatmulMaxRows + 1, 6})));
  }
}

TEST(SkinnyMatmul, GroupedEntryWritesEachProductAsItsOwnCall) {
  const Tensor x = random_tensor({3, 40}, DType::bf16, 3);
  const std::vector<Tensor> ws{random_tensor({9, 40}, DType::bf16, 4), random_tensor({2, 40}, DType::bf16, 5),
                               random_tensor({1, 40}, DType::bf16, 6)};
  std::vector<Tensor> ys{Tensor::empty({3, 9}, DType::f32), Tensor::empty({3, 2}, DType::f32),
                         Tensor::empty({3, 1}, DType::f32)};
  skinny_matmul_grouped(x, ws, ys);
  for (size_t i = 0; i < ws.size(); ++i) expect_close(ys[i], skinny_matmul(x, ws[i], DType::f32), 0, 0);
}

TEST(SkinnyMatmul, GroupedBadArgumentsNameTheProblem) {
  const Tensor x = zeros_bf16({4, 8}), w = zeros_bf16({6, 8});
  std::vector<Tensor> two{Tensor::empty({4, 6}, DType::f32), Tensor::empty({4, 6}, DType::f32)};
  expect_error([&] { skinny_matmul_grouped(x, std::vector<Tensor>{w}, two); }, {"1 to 4 weights", "1 weights and 2"});
  const std::vector<Tensor> five(5, w);
  std::vector<Tensor> five_out(5, Tensor::empty({4, 6}, DType::f32));
  expect_error([&] { skinny_matmul_grouped(x, five, five_out); }, {"1 to 4 weights", "got 5"});
  std::vector<Tensor> mixed{Tensor::empty({4, 6}, DType::f32), zeros_bf16({4, 6})};
  expect_error([&] { skinny_matmul_grouped(x, std::vector<Tensor>{w, w}, mixed); }, {"share one dtype"});
  std::vector<Tensor> same{two[0], two[0]};
  expect_error([&] { skinny_matmul_grouped(x, std::vector<Tensor>{w, w}, same); }, {"outputs 0 and 1 share storage"});
  std::vector<Tensor> wrong{Tensor::empty({4, 5}, DType::f32)};
  expect_error([&] { skinny_matmul_grouped(x, std::vector<Tensor>{w}, wrong); }, {"should be [4, 6]"});
}

TEST(MatmulEach, WritesEachProductAsMatmulDoes) {
  const Tensor a = random_tensor({5, 12}, DType::f32, 7);
  const std::vector<Tensor> bs{random_tensor({7, 12}, DType::f32, 8), random_tensor({3, 12}, DType::f32, 9)};
  std::vector<Tensor> cs{Tensor::empty({5, 7}, DType::f32), Tensor::empty({5, 3}, DType::f32)};
  matmul_each(a, bs, cs);
  for (size_t i = 0; i < bs.size(); ++i) expect_close(cs[i], matmul(a, false, bs[i], true), 0, 0);
}

TEST(MatmulEach, BadArgumentsNameTheProblem) {
  const Tensor a = random_tensor({5, 12}, DType::f32, 7), b = random_tensor({7, 12}, DType::f32, 8);
  std::vector<Tensor> none;
  expect_error([&] { matmul_each(a, std::vector<Tensor>{b}, none); }, {"matmul_each", "one output per weight"});
  std::vector<Tensor> wrong{Tensor::empty({5, 6}, DType::f32)};
  expect_error([&] { matmul_each(a, std::vector<Tensor>{b}, wrong); }, {"matmul_each", "should be [5, 7]"});
  std::vector<Tensor> inner{Tensor::empty({5, 7}, DType::f32)};
  expect_error(
      [&] {
        matmul_each(a, std::vector<Tensor>{random_tensor({7, 11}, DType::f32, 9)}, inner);
      },
      {"matmul_each", "inner dimensions differ"});
  const Tensor c = Tensor::empty({5, 7}, DType::f32);
  std::vector<Tensor> shared{c, c};
  expect_error([&] { matmul_each(a, std::vector<Tensor>{b, b}, shared); }, {"outputs 0 and 1 share storage"});
}

// The residual step's CPU entry: the step in f32, rounded to BF16 where the kernels round, then the products
// of what the next sublayer reads; both kinds.
TEST(SkinnyMatmul, AfterAResidualStepIsTheStepThenTheProducts) {
  const int64_t M = 3, K = 40;
  const Tensor r = random_tensor({M, K}, DType::bf16, 1), x = random_tensor({M, K}, DType::bf16, 2),
               w = random_tensor({K}, DType::bf16, 3);
  const Tensor ws[2] = {random_tensor({7, K}, DType::bf16, 4), random_tensor({5, K}, DType::bf16, 5)};
  for (const ResidualStep kind : {ResidualStep::post_norm, ResidualStep::pre_norm}) {
    Tensor ys[2] = {Tensor::empty({M, 7}, DType::bf16), Tensor::empty({M, 5}, DType::bf16)};
    Tensor h = Tensor::empty({M, K}, DType::bf16);
    skinny_matmul_after_residual_step({kind, r, x, w, 1e-5}, ws, ys, h);
    const Tensor r32 = r.to(DType::f32), x32 = x.to(DType::f32), w32 = w.to(DType::f32);
    Tensor want_h, in;
    if (kind == ResidualStep::post_norm) {
      want_h = rms_norm_forward(x32, w32, 1e-5, r32).y.to(DType::bf16);
      in = want_h;
    } else {
      want_h = add(r32, x32).to(DType::bf16);
      in = rms_norm_forward(want_h.to(DType::f32), w32, 1e-5).y.to(DType::bf16);
    }
    expect_close(h.to(DType::f32), want_h.to(DType::f32), 0, 0);
    for (int i = 0; i < 2; ++i)
      expect_close(ys[i].to(DType::f32), skinny_matmul(in, ws[i], DType::bf16).to(DType::f32), 0, 0);
  }
}

// The gated form: the same step, then skinny_swiglu of what it gives, and h as the ungated form writes it.
TEST(SkinnyMatmul, SwigluAfterAResidualStepIsTheStepThenSwiglu) {
  const int64_t M = 2, K = 48, F = 9;
  const Tensor r = random_tensor({M, K}, DType::bf16, 6), x = random_tensor({M, K}, DType::bf16, 7),
               w = random_tensor({K}, DType::bf16, 8);
  const Tensor gate = random_tensor({F, K}, DType::bf16, 9), up = random_tensor({F, K}, DType::bf16, 10);
  for (const ResidualStep kind : {ResidualStep::post_norm, ResidualStep::pre_norm}) {
    Tensor y = Tensor::empty({M, F}, DType::bf16), h = Tensor::empty({M, K}, DType::bf16);
    skinny_swiglu_after_residual_step({kind, r, x, w, 1e-5}, gate, up, y, h);
    const Tensor ws[2] = {gate, up};
    Tensor products[2] = {Tensor::empty({M, F}, DType::bf16), Tensor::empty({M, F}, DType::bf16)};
    Tensor want_h = Tensor::empty({M, K}, DType::bf16);
    skinny_matmul_after_residual_step({kind, r, x, w, 1e-5}, ws, products, want_h);
    expect_close(h.to(DType::f32), want_h.to(DType::f32), 0, 0);
    const Tensor want = swiglu_forward(products[0].to(DType::f32), products[1].to(DType::f32)).to(DType::bf16);
    expect_close(y.to(DType::f32), want.to(DType::f32), 0, 0);
  }
  Tensor y = Tensor::empty({M, F}, DType::bf16), h = Tensor::empty({M, K}, DType::bf16);
  expect_error(
      [&] {
        skinny_swiglu_after_residual_step({ResidualStep::post_norm, r, x, w, 1e-5}, gate,
                                          random_tensor({F + 1, K}, DType::bf16, 11), y, h);
      },
      {"skinny_swiglu_after_residual_step", "should be [2, 10]"});
  Tensor wide = y.to(DType::f32);
  expect_error(
      [&] {
        skinny_swiglu_after_residual_step({ResidualStep::post_norm, r, x, w, 1e-5}, gate, up, wide, h);
      },
      {"skinny_swiglu_after_residual_step", "the outputs must be BF16"});
}

TEST(SkinnyMatmul, AfterAResidualStepBadArgumentsNameTheProblem) {
  const Tensor r = zeros_bf16({2, 64}), x = zeros_bf16({2, 64}), w = zeros_bf16({64});
  const Tensor ws[1] = {zeros_bf16({8, 64})};
  Tensor ys[1] = {zeros_bf16({2, 8})};
  Tensor h = zeros_bf16({2, 64});
  const auto call = [&](const ResidualStepInputs& step, Tensor& out) {
    skinny_matmul_after_residual_step(step, ws, ys, out);
  };
  expect_error(
      [&] {
        call({ResidualStep::post_norm, r, x, zeros_bf16({63}), 1e-5}, h);
      },
      {"the norm's weight [K]", "weight BF16[63]"});
  expect_error(
      [&] {
        call({ResidualStep::post_norm, zeros_bf16({2, 32}), x, w, 1e-5}, h);
      },
      {"residual, x and h must be [M, K]"});
  expect_error(
      [&] {
        call({ResidualStep::pre_norm, r.to(DType::f32), x, w, 1e-5}, h);
      },
      {"the step's tensors must be BF16", "F32[2, 64]"});
  expect_error([&] { call({ResidualStep::post_norm, r, x, w, 0.0}, h); }, {"eps must be positive"});
  Tensor aliased = r;
  expect_error(
      [&] {
        call({ResidualStep::post_norm, r, x, w, 1e-5}, aliased);
      },
      {"h must not share storage with the step's inputs"});
  Tensor onto_residual[1] = {r.view({16, 8}).narrow(0, 2)};
  expect_error(
      [&] {
        skinny_matmul_after_residual_step({ResidualStep::post_norm, r, x, w, 1e-5}, ws, onto_residual, h);
      },
      {"output 0 shares storage with h or the step's inputs"});
  Tensor wrong_out[1] = {zeros_bf16({2, 8}).to(DType::f32)};
  expect_error(
      [&] {
        skinny_matmul_after_residual_step({ResidualStep::post_norm, r, x, w, 1e-5}, ws, wrong_out, h);
      },
      {"the outputs must be BF16"});
}

TEST(SkinnyMatmul, ResidualStepFitsOnlyWhatTheLaunchTakes) {
  const auto fits = [](int64_t M, int64_t K) {
    const Tensor ws[1] = {zeros_bf16({8, K})};
    return residual_step_fits({ResidualStep::post_norm, zeros_bf16({M, K}), zeros_bf16({M, K}), zeros_bf16({K}), 1e-5},
                              ws);
  };
  EXPECT_TRUE(fits(1, 2048));
  EXPECT_TRUE(fits(1, 288));
  EXPECT_FALSE(fits(2, 2048));  // past the one row whose step pays
  EXPECT_FALSE(fits(1, 256));   // the norm kernel's small-row layout
  EXPECT_FALSE(fits(1, 1000));  // K not a multiple of 32
  EXPECT_FALSE(fits(1, 4096));  // wider than a thread's registers hold
  const Tensor empty_w[1] = {zeros_bf16({0, 2048})};
  EXPECT_FALSE(residual_step_fits(
      {ResidualStep::pre_norm, zeros_bf16({1, 2048}), zeros_bf16({1, 2048}), zeros_bf16({2048}), 1e-5}, empty_w));
}
