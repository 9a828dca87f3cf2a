// The skinny GEMM (decoding's x W^T) against the CPU matmul: every M tile count, K that is and is not a
// multiple of 8 and of the 32-element chunk, N below, at and past the 16-row tile, operands one element
// off 16-byte alignment (the element-load path), and matmul's dispatch between it and cuBLASLt.
//
// Tolerances. The inputs are bf16 values the CPU sees exactly as f32; a product of two bf16 is exact in
// f32, so an F32 output differs from the CPU's only by the order of the f32 additions: relative L2 about
// 1e-6, held to 1e-4 (any lost or doubled 32-element chunk, any misplaced fragment moves it by 1e-2 or
// more). A BF16 output adds one rounding (relative 2^-9 at most, about 1e-3 in L2): the house 1e-2.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/runtime/backend.h"
#include "kernels/runtime/dependent_launch.h"
#include "kernels/swiglu/swiglu.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/kernel_choice_scope.h"

using namespace fathom;
using namespace fathom::test;

namespace {

constexpr double kF32OutputTolerance = 1e-4;

std::string label(int64_t m, int64_t k, int64_t n, const std::string& extra = "") {
  return "M=" + std::to_string(m) + " K=" + std::to_string(k) + " N=" + std::to_string(n) + extra;
}

// A fresh output full of NaN: a kernel that leaves any element unwritten fails.
Tensor nan_output(int64_t m, int64_t n, DType dtype) {
  return Tensor::full({m, n}, std::numeric_limits<double>::quiet_NaN(), dtype, kGpu);
}

// skinny_matmul of x and w (GPU) in both output dtypes against want (the CPU's f32 product).
void expect_skinny_close(const Tensor& x, const Tensor& w, const Tensor& want, const std::string& what) {
  Tensor y32 = nan_output(x.dim(0), w.dim(0), DType::f32), y16 = nan_output(x.dim(0), w.dim(0), DType::bf16);
  skinny_matmul(x, w, y32);
  skinny_matmul(x, w, y16);
  EXPECT_LE(relative_l2(y32, want), kF32OutputTolerance) << what << ", F32 output: relative L2 error";
  EXPECT_GPU_CLOSE(y16, want, DType::bf16, what + ", BF16 output");
}

// Random bf16 values of `shape` viewed one element past a 16-byte boundary (GPU) and the same f32 values.
GpuInput unaligned_input(const Shape& shape, uint64_t seed) {
  const GpuInput flat = random_input({shape.numel() + 1}, DType::bf16, seed);
  return {flat.gpu.narrow(1, shape.numel()).view(shape), flat.cpu.narrow(1, shape.numel()).view(shape)};
}

}  // namespace

// K of 512, 768, 1024, 1504 and 1760 leave a warp of eight splits (one tile a CTA, as every N here takes at these K)
// 2, 3, 4, 5-6 and 6-7 chunks past its whole steps of eight (M <= 8; the steps are four and two chunks at more rows).
TEST(GpuSkinnyMatmul, MatchesTheCpuOnAwkwardShapes) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const int64_t k : {8, 24, 100, 512, 768, 1024, 1504, 1760, 2048, 8192}) {
    const GpuInput x = random_input({kSkinnyMatmulMaxRows, k}, DType::bf16, seed++);
    for (const int64_t n : {1, 5, 127, 2048, 6144}) {
      const GpuInput w = random_input({n, k}, DType::bf16, seed++);
      for (const int64_t m : {1, 2, 3, 7, 8, 16, 17, 32}) {
        const Tensor want = matmul(x.cpu.narrow(0, m), false, w.cpu, true);
        expect_skinny_close(x.gpu.narrow(0, m), w.gpu, want, label(m, k, n));
      }
    }
  }
}

// K split across the CTAs of a cluster (FATHOM_SKINNY_SPLIT_K_CTAS) for every count and auto: against the CPU on
// decoding's narrow shapes and awkward ones (K off the chunk, few chunks for many warps, N off the tile, every M tile
// count), and the same bits on a second run. Every shape takes one tile a CTA (at least 8 chunks of K), so every
// count clusters it, and auto those whose tiles leave half the SMs idle with two chunks a warp (here 768 x 3072 in 5
// CTAs and 100 x 16392 in 8); K of 16392 gives the warps of 8 CTAs whole steps of 8 chunks. A grouped launch of two or
// more weights does not take it (its members keep their single calls' bits only where the choice is off).
TEST(GpuSkinnyMatmul, KSplitAcrossClusterCtasMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  if (!cuda::current_device_supports_sm90_launches()) GTEST_SKIP() << "thread-block clusters need sm_90";
  SkinnyPolicyScope policy(SkinnyMatmulPolicy::always);
  uint64_t seed = 1000;
  for (const int ctas : {kSkinnySplitKAuto, 2, 3, 5, 8}) {
    SkinnySplitKCtasScope split(ctas);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{768, 768},
                               {768, 3072},
                               {2048, 2048},
                               {2048, 8192},
                               {100, 1000},
                               {16, 264},
                               {37, 296},
                               {100, 16392}}) {
      const GpuInput x = random_input({kSkinnyMatmulMaxRows, k}, DType::bf16, seed++);
      const GpuInput w = random_input({n, k}, DType::bf16, seed++);
      for (const int64_t m : {1, 8, 9, 17, 32}) {
        const std::string what = label(m, k, n, ", split-K CTAs " + std::to_string(ctas));
        const Tensor want = matmul(x.cpu.narrow(0, m), false, w.cpu, true);
        expect_skinny_close(x.gpu.narrow(0, m), w.gpu, want, what);
        Tensor first = nan_output(m, n, DType::f32), second = nan_output(m, n, DType::f32);
        skinny_matmul(x.gpu.narrow(0, m), w.gpu, first);
        skinny_matmul(x.gpu.narrow(0, m), w.gpu, second);
        EXPECT_TRUE(bitwise_equal(first, second)) << what << ": two runs differ";
      }
    }
  }
}

TEST(GpuSkinnyMatmul, OperandsOffSixteenByteAlignmentTakeTheElementLoads) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const int64_t k : {24, 100, 2048})
    for (const int64_t n : {5, 127, 2048})
      for (const int64_t m : {1, 8, 17}) {
        const GpuInput x = random_input({m, k}, DType::bf16, seed++), w = random_input({n, k}, DType::bf16, seed++);
        const GpuInput xu = unaligned_input({m, k}, seed++), wu = unaligned_input({n, k}, seed++);
        expect_skinny_close(xu.gpu, w.gpu, matmul(xu.cpu, false, w.cpu, true), label(m, k, n, " x unaligned"));
        expect_skinny_close(x.gpu, wu.gpu, matmul(x.cpu, false, wu.cpu, true), label(m, k, n, " w unaligned"));
        expect_skinny_close(xu.gpu, wu.gpu, matmul(xu.cpu, false, wu.cpu, true), label(m, k, n, " both unaligned"));
        // An output one element off alignment: the stores are per element anyway.
        Tensor flat = Tensor::full({m * n + 1}, std::numeric_limits<double>::quiet_NaN(), DType::f32, kGpu);
        Tensor y = flat.narrow(1, m * n).view({m, n});
        skinny_matmul(x.gpu, w.gpu, y);
        EXPECT_LE(relative_l2(y, matmul(x.cpu, false, w.cpu, true)), kF32OutputTolerance)
            << label(m, k, n, " y unaligned");
      }
}

TEST(GpuSkinnyMatmul, EmptyInnerDimensionWritesZerosAndEmptyOutputsAreFine) {
  FATHOM_REQUIRE_GPU();
  Tensor y = nan_output(3, 5, DType::bf16);
  skinny_matmul(Tensor::empty({3, 0}, DType::bf16, kGpu), Tensor::empty({5, 0}, DType::bf16, kGpu), y);
  EXPECT_EQ(relative_l2(y, Tensor::zeros({3, 5}, DType::f32)), 0.0);
  Tensor none = Tensor::empty({0, 5}, DType::f32, kGpu);
  skinny_matmul(Tensor::empty({0, 8}, DType::bf16, kGpu), Tensor::empty({5, 8}, DType::bf16, kGpu), none);
  Tensor no_rows = Tensor::empty({3, 0}, DType::f32, kGpu);
  skinny_matmul(Tensor::empty({3, 8}, DType::bf16, kGpu), Tensor::empty({0, 8}, DType::bf16, kGpu), no_rows);
}

TEST(GpuSkinnyMatmul, IsDeterministic) {
  FATHOM_REQUIRE_GPU();
  const GpuInput x = random_input({17, 8192}, DType::bf16, 7), w = random_input({2048, 8192}, DType::bf16, 8);
  const Tensor first = skinny_matmul(x.gpu, w.gpu, DType::f32);
  EXPECT_TRUE(bitwise_equal(first, skinny_matmul(x.gpu, w.gpu, DType::f32)));
}

// The decode shapes of the 1B model (fused q/k/v, o_proj, gate/up, down_proj, a head of 16K rows):
// matmul through cuBLASLt (policy never) and through the skinny kernel (always) agree with each other
// and with the CPU, and the automatic policy runs the skinny kernel up to its row limit and cuBLASLt past
// it (bit for bit the one or the other).
TEST(GpuSkinnyMatmul, MatmulDispatchAgreesWithCublasLtAtDecodeShapes) {
  FATHOM_REQUIRE_GPU();
  struct DecodeShape {
    int64_t k, n;
  };
  uint64_t seed = 200;
  for (const DecodeShape s : {DecodeShape{2048, 6144}, DecodeShape{2048, 2048}, DecodeShape{2048, 16384},
                              DecodeShape{8192, 2048}, DecodeShape{2048, 16384 + 5}})
    for (const int64_t m : {1, 8, 32})
      for (const DType out : {DType::bf16, DType::f32}) {
        const std::string what = label(m, s.k, s.n, std::string(" ") + dtype_name(out));
        const GpuInput x = random_input({m, s.k}, DType::bf16, seed++),
                       w = random_input({s.n, s.k}, DType::bf16, seed++);
        const auto through_matmul = [&](SkinnyMatmulPolicy policy) {
          SkinnyPolicyScope scope(policy);
          Tensor y = nan_output(m, s.n, out);
          matmul(x.gpu, false, w.gpu, true, y);
          return y;
        };
        const Tensor cublas = through_matmul(SkinnyMatmulPolicy::never);
        const Tensor skinny = through_matmul(SkinnyMatmulPolicy::always);
        const Tensor automatic = through_matmul(SkinnyMatmulPolicy::automatic);
        const double tolerance = out == DType::f32 ? kF32OutputTolerance : tolerance_for(DType::bf16);
        EXPECT_LE(relative_l2(skinny, cublas), tolerance) << what << ": skinny against cuBLASLt";
        EXPECT_LE(relative_l2(skinny, matmul(x.cpu, false, w.cpu, true)), tolerance) << what << ": against the CPU";
        if (m <= kSkinnyMatmulAutoRows)
          EXPECT_TRUE(bitwise_equal(automatic, skinny_matmul(x.gpu, w.gpu, out)))
              << what << ": auto is the skinny path";
        else
          EXPECT_TRUE(bitwise_equal(automatic, cublas)) << what << ": auto past its row limit is cuBLASLt";
      }
}

// Mixed precision's linear_wide (MoD's router, N = 1) and a larger M under `always` and `auto`.
TEST(GpuSkinnyMatmul, SingleOutputRowsAndTheRowLimit) {
  FATHOM_REQUIRE_GPU();
  const GpuInput x = random_input({kSkinnyMatmulMaxRows + 1, 768}, DType::bf16, 300),
                 w = random_input({1, 768}, DType::bf16, 301);
  for (const int64_t m : {int64_t(1), int64_t(5), kSkinnyMatmulMaxRows, kSkinnyMatmulMaxRows + 1}) {
    Tensor y = nan_output(m, 1, DType::f32);
    matmul(x.gpu.narrow(0, m), false, w.gpu, true, y);  // past the limit: cuBLASLt
    EXPECT_LE(relative_l2(y, matmul(x.cpu.narrow(0, m), false, w.cpu, true)), kF32OutputTolerance) << label(m, 768, 1);
  }
}

// One grouped launch (a layer's q/k/v or gate/up) writes each output exactly as its own call: the Llama
// 3.2 1B's q/k/v (GQA: 2048, 512, 512), the 1B OLMo2's gate/up, odd widths with a short and an unaligned
// K (the element loads), and an empty member; then matmul_each's dispatch under each policy.
TEST(GpuSkinnyMatmul, GroupedLaunchEqualsEachCallBitForBit) {
  FATHOM_REQUIRE_GPU();
  SkinnySplitKCtasScope one_cta_a_tile(1);  // single calls that split K across CTAs differ in bits
  struct Group {
    int64_t k;
    std::vector<int64_t> n;
  };
  uint64_t seed = 400;
  // {16384, 2048, 7} at K 2048: members of different tile counts per CTA (2, 1, 1 on 132 SMs).
  for (const Group& g : {Group{2048, {2048, 512, 512}}, Group{2048, {8192, 8192}}, Group{2048, {16384, 2048, 7}},
                         Group{100, {7, 300, 1, 16}}, Group{24, {5, 0, 33}}})
    for (const int64_t m : {1, 5, 8, 17, 32})
      for (const DType out : {DType::bf16, DType::f32}) {
        const GpuInput x = random_input({m, g.k}, DType::bf16, seed++);
        std::vector<GpuInput> w;
        std::vector<Tensor> ws, ys;
        for (const int64_t n : g.n) {
          w.push_back(random_input({n, g.k}, DType::bf16, seed++));
          ws.push_back(w.back().gpu);
          ys.push_back(nan_output(m, n, out));
        }
        skinny_matmul_grouped(x.gpu, ws, ys);
        for (size_t i = 0; i < ws.size(); ++i) {
          const std::string what = label(m, g.k, g.n[i], " member " + std::to_string(i) + " " + dtype_name(out));
          EXPECT_TRUE(bitwise_equal(ys[i], skinny_matmul(x.gpu, ws[i], out))) << what;
          if (g.n[i] > 0) {
            EXPECT_LE(relative_l2(ys[i], matmul(x.cpu, false, w[i].cpu, true)),
                      out == DType::f32 ? kF32OutputTolerance : tolerance_for(DType::bf16))
                << what << ": against the CPU";
          }
        }
        const auto through_matmul_each = [&](SkinnyMatmulPolicy policy) {
          SkinnyPolicyScope scope(policy);
          std::vector<Tensor> each;
          for (const int64_t n : g.n) each.push_back(nan_output(m, n, out));
          matmul_each(x.gpu, ws, each);
          return each;
        };
        const std::vector<Tensor> grouped = through_matmul_each(SkinnyMatmulPolicy::automatic);
        const std::vector<Tensor> cublas = through_matmul_each(SkinnyMatmulPolicy::never);
        for (size_t i = 0; i < ws.size(); ++i) {
          Tensor one = nan_output(m, g.n[i], out);
          {
            SkinnyPolicyScope scope(SkinnyMatmulPolicy::never);
            matmul(x.gpu, false, ws[i], true, one);
          }
          EXPECT_TRUE(bitwise_equal(cublas[i], one)) << "matmul_each, never: member " << i;
          // auto: the grouped launch up to the row limit, cuBLASLt per member past it
          EXPECT_TRUE(bitwise_equal(grouped[i], m <= kSkinnyMatmulAutoRows ? ys[i] : one))
              << "matmul_each, auto, M " << m << ": member " << i;
        }
      }
}

// A member off 16-byte alignment sends the whole launch to the element loads, which give the same bits as
// the 16-byte loads the aligned members would take alone.
TEST(GpuSkinnyMatmul, AnUnalignedMemberLeavesTheOthersBitsAsTheirOwnCalls) {
  FATHOM_REQUIRE_GPU();
  SkinnySplitKCtasScope one_cta_a_tile(1);  // single calls that split K across CTAs differ in bits
  for (const int64_t m : {1, 8, 32}) {
    const GpuInput x = random_input({m, 2048}, DType::bf16, 700 + m);
    const GpuInput aligned = random_input({2048, 2048}, DType::bf16, 710 + m),
                   off = unaligned_input({512, 2048}, 720 + m);
    const std::vector<Tensor> ws{aligned.gpu, off.gpu};
    std::vector<Tensor> ys{nan_output(m, 2048, DType::bf16), nan_output(m, 512, DType::bf16)};
    skinny_matmul_grouped(x.gpu, ws, ys);
    for (size_t i = 0; i < ws.size(); ++i)
      EXPECT_TRUE(bitwise_equal(ys[i], skinny_matmul(x.gpu, ws[i], DType::bf16))) << "M " << m << " member " << i;
  }
}

#ifdef FATHOM_WITH_CUDA
namespace {

// chain()'s outputs under dependent launches, eagerly and replayed from a CUDA graph, each run after prepare(): bit for
// bit those of ordinary launches.
void expect_dependent_chain_keeps_bits(const std::function<std::vector<Tensor>()>& chain,
                                       const std::function<void()>& prepare, const std::string& what) {
  std::vector<Tensor> want;
  {
    DependentLaunchScope ordinary(Toggle::off);
    want = chain();
  }
  const auto expect_bits = [&](const std::vector<Tensor>& got, const std::string& run) {
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bitwise_equal(got[i], want[i])) << run << ", output " << i;
  };
  DependentLaunchScope dependent(Toggle::on);
  prepare();
  expect_bits(chain(), what + ", eager");
  std::vector<Tensor> replayed;
  std::string reason;
  prepare();
  const cuda::Graph graph = cuda::Graph::capture(
      0, [&] { replayed = chain(); }, &reason);
  ASSERT_TRUE(graph.captured()) << reason;
  graph.replay();
  expect_bits(replayed, what + ", replayed from a graph");
}

}  // namespace

// With FATHOM_DEPENDENT_LAUNCH on, every kernel of an add -> norm -> GEMM chain starts while the one ahead
// of it still runs (the GEMM fetching its weights meanwhile): each must wait for its input, eagerly and
// replayed from a CUDA graph, and give the bits of ordinary launches. Before each run the allocator's free
// blocks of the chain's sizes are filled with NaN, so an input read before it is written shows (likely, not
// certainly: the kernel ahead lasts microseconds).
TEST(GpuSkinnyMatmul, ADependentLaunchWaitsForItsInputAndKeepsTheBits) {
  FATHOM_REQUIRE_GPU();
  SkinnyPolicyScope policy(SkinnyMatmulPolicy::always);
  for (const int64_t m : {1, 8, 32}) {
    const int64_t d = 1024;
    const Tensor x = random_input({m, d}, DType::bf16, 800 + m).gpu;
    const Tensor norm_weight = Tensor::full({d}, 1.0, DType::bf16, kGpu);
    std::vector<Tensor> ws;
    for (int i = 0; i < 6; ++i) ws.push_back(random_input({d, d}, DType::bf16, 810 + 10 * m + i).gpu);
    const auto chain = [&] {
      Tensor h = x;
      for (const Tensor& w : ws) {
        Tensor next = nan_output(m, d, DType::bf16);  // made first: the norm is the GEMM's direct predecessor
        const Tensor normed = rms_norm_forward(add(h, x), norm_weight, 1e-5).y;
        skinny_matmul(normed, w, next);
        h = next;
      }
      return std::vector<Tensor>{h};
    };
    const auto poison_free_blocks = [&] {
      std::vector<Tensor> held;
      for (int i = 0; i < 16; ++i) held.push_back(nan_output(m, d, DType::bf16));
    };
    expect_dependent_chain_keeps_bits(chain, poison_free_blocks, "M " + std::to_string(m));
  }
}

// GEMMs feeding GEMMs as dependent launches: each GEMM's CTAs start, and ask L2 for their weights, while the GEMM
// ahead still runs, and must wait for it before they read its output. One GEMM is wider than the GPU holds at once
// (784 CTAs of 8 tiles), so its successor launches only as its last CTAs finish their loads. Eager and replayed from a
// graph, every output must keep the bits of ordinary launches; each output is NaN until written, so a product that
// read its input early shows. Then with K split across the CTAs of clusters (auto; on 132 SMs 2 CTAs a tile for the
// d x d GEMMs and 8 for the last, narrow one), against ordinary launches with the same split; each with and without the
// CTAs' L2 prefetch of their first step of W (FATHOM_SKINNY_L2_PREFETCH always and never).
TEST(GpuSkinnyMatmul, GemmsFeedingGemmsUnderDependentLaunchesKeepTheirBits) {
  FATHOM_REQUIRE_GPU();
  SkinnyPolicyScope policy(SkinnyMatmulPolicy::always);
  const int64_t d = 1024, wide = 100352, tail = 16;
  const auto weight = [](int64_t n, int64_t k, uint64_t seed) {
    return random_input({n, k}, DType::bf16, seed, -0.05, 0.05).gpu;
  };
  const Tensor w1 = weight(d, d, 901), w2 = weight(d, d, 902), w_wide = weight(wide, d, 903);
  const Tensor w_tail = weight(tail, wide, 904);
  for (const int64_t m : {1, 8, 32}) {
    const Tensor x = random_input({m, d}, DType::bf16, 910 + m).gpu;
    const auto chain = [&] {
      std::vector<Tensor> y{nan_output(m, d, DType::bf16), nan_output(m, d, DType::bf16),
                            nan_output(m, wide, DType::bf16), nan_output(m, tail, DType::bf16)};
      skinny_matmul(x, w1, y[0]);
      skinny_matmul(y[0], w2, y[1]);
      skinny_matmul(y[1], w_wide, y[2]);
      skinny_matmul(y[2], w_tail, y[3]);
      return y;
    };
    for (const int ctas : {1, kSkinnySplitKAuto})
      for (const Usage prefetch : {Usage::always, Usage::never}) {
        SkinnySplitKCtasScope split(ctas);
        SkinnyL2PrefetchScope asked(prefetch);
        expect_dependent_chain_keeps_bits(chain, [] {},
                                          "M " + std::to_string(m) + (ctas == 1 ? "" : ", K split across CTAs") +
                                              (prefetch == Usage::always ? ", L2 prefetch" : ", no L2 prefetch"));
      }
  }
}
#endif

// skinny_swiglu is SwiGLU of the two skinny products as they are stored, bit for bit: every M tile count,
// K off the chunk and off 8 (the element loads), widths below, at and past a tile and a decoding FFN's,
// BF16 and F32 outputs, an unaligned x; and close to the CPU's products and SwiGLU.
TEST(GpuSkinnyMatmul, SwigluOfTheProductsBitForBit) {
  FATHOM_REQUIRE_GPU();
  SkinnySplitKCtasScope one_cta_a_tile(1);  // single calls that split K across CTAs differ in bits
  uint64_t seed = 300;
  for (const int64_t m : {1, 8, 9, 32})
    for (const auto& [f, k] : {std::pair<int64_t, int64_t>{3072, 768}, {8192, 2048}, {37, 100}, {16, 24}, {130, 1003}})
      for (const DType out : {DType::bf16, DType::f32})
        for (const bool unaligned : {false, true}) {
          const std::string what = label(m, k, f, std::string(" ") + dtype_name(out) + (unaligned ? " unaligned" : ""));
          const GpuInput x = unaligned ? unaligned_input({m, k}, seed++) : random_input({m, k}, DType::bf16, seed++);
          const GpuInput gate = random_input({f, k}, DType::bf16, seed++),
                         up = random_input({f, k}, DType::bf16, seed++);
          Tensor fused = nan_output(m, f, out), g = nan_output(m, f, out), u = nan_output(m, f, out);
          skinny_swiglu(x.gpu, gate.gpu, up.gpu, fused);
          skinny_matmul(x.gpu, gate.gpu, g);
          skinny_matmul(x.gpu, up.gpu, u);
          EXPECT_TRUE(bitwise_equal(fused, swiglu_forward(g, u))) << what;
          Tensor want = Tensor::empty({m, f}, out);
          skinny_swiglu(x.cpu.to(DType::bf16), gate.cpu.to(DType::bf16), up.cpu.to(DType::bf16), want);
          if (out == DType::f32)
            EXPECT_LE(relative_l2(fused, want), kF32OutputTolerance) << what << ": against the CPU";
          else
            EXPECT_GPU_CLOSE(fused, want, out, what + ": against the CPU");
        }
  // An empty K gates zeros; an empty width writes nothing.
  Tensor zeros = nan_output(2, 5, DType::bf16), none = Tensor::empty({2, 0}, DType::bf16, kGpu);
  skinny_swiglu(Tensor::empty({2, 0}, DType::bf16, kGpu), Tensor::empty({5, 0}, DType::bf16, kGpu),
                Tensor::empty({5, 0}, DType::bf16, kGpu), zeros);
  EXPECT_TRUE(bitwise_equal(zeros, Tensor::zeros({2, 5}, DType::bf16, kGpu)));
  skinny_swiglu(random_input({2, 8}, DType::bf16, 9).gpu, Tensor::empty({0, 8}, DType::bf16, kGpu),
                Tensor::empty({0, 8}, DType::bf16, kGpu), none);
}

namespace {

// A residual step by its own kernel (rms_norm_forward with a residual post-norm, add_rms_norm_forward pre-norm): h,
// and the input it gives the next sublayer.
struct SteppedByItsKernel {
  Tensor h, in;
};
SteppedByItsKernel step_by_its_kernel(const ResidualStepInputs& step) {
  if (step.kind == ResidualStep::post_norm) {
    const Tensor h = rms_norm_forward(step.x, step.weight, step.eps, step.residual).y;
    return {h, h};
  }
  const AddRmsNormOutput out = add_rms_norm_forward(step.residual, step.x, step.weight, step.eps);
  return {out.sum, out.normed.y};
}

}  // namespace

// The residual step and SwiGLU of gate/up in one launch against the step's kernel and skinny_swiglu of its output
// (the step launch's bits, AfterAResidualStepGivesTheStepKernelsAndTheProductsBits), bit for bit, h and y
// (NaN-filled); and against the CPU.
// The widths of AfterAResidualStepGivesTheStepKernelsAndTheProductsBits, gate and up of one shape, and a width of 16384
// at K 384, whose CTAs take two tiles of each weight (four splits of K a tile, not eight).
TEST(GpuSkinnyMatmul, SwigluAfterAResidualStepGivesTheStepAndSwigluBits) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 500;
  for (const auto& [k, f] :
       {std::pair<int64_t, int64_t>{2048, 8192}, {2048, 37}, {768, 3072}, {288, 16}, {384, 16384}})
    for (const ResidualStep kind : {ResidualStep::post_norm, ResidualStep::pre_norm}) {
      const std::string what = label(1, k, f, kind == ResidualStep::post_norm ? " post-norm" : " pre-norm");
      const GpuInput r = random_input({1, k}, DType::bf16, seed++), x = random_input({1, k}, DType::bf16, seed++),
                     w = random_input({k}, DType::bf16, seed++, 0.5, 1.5);
      const GpuInput gate = random_input({f, k}, DType::bf16, seed++), up = random_input({f, k}, DType::bf16, seed++);
      const ResidualStepInputs step{kind, r.gpu, x.gpu, w.gpu, 1e-5};
      Tensor y = nan_output(1, f, DType::bf16), h = nan_output(1, k, DType::bf16);
      skinny_swiglu_after_residual_step(step, gate.gpu, up.gpu, y, h);
      // The step's kernel (h, and the input it gives the MLP), then skinny_swiglu of that input.
      const auto [want_h, in] = step_by_its_kernel(step);
      Tensor want = nan_output(1, f, DType::bf16);
      skinny_swiglu(in, gate.gpu, up.gpu, want);
      EXPECT_TRUE(bitwise_equal(h, want_h)) << what << ": h";
      EXPECT_TRUE(bitwise_equal(y, want)) << what << ": SwiGLU";
      Tensor cpu_y = Tensor::empty({1, f}, DType::bf16), cpu_h = Tensor::empty({1, k}, DType::bf16);
      skinny_swiglu_after_residual_step(
          {kind, r.cpu.to(DType::bf16), x.cpu.to(DType::bf16), w.cpu.to(DType::bf16), 1e-5}, gate.cpu.to(DType::bf16),
          up.cpu.to(DType::bf16), cpu_y, cpu_h);
      EXPECT_GPU_CLOSE(h, cpu_h.to(DType::f32), DType::bf16, what + ": h against the CPU");
      EXPECT_GPU_CLOSE(y, cpu_y.to(DType::f32), DType::bf16, what + ": SwiGLU against the CPU");
    }
}

// The residual step inside the products' launch against the step's own kernel (rms_norm_forward with a
// residual post-norm, add_rms_norm_forward pre-norm) and the grouped products of its output, bit for bit,
// h and every output (NaN-filled, so none is left unwritten); and against the CPU. One row (the launch's
// limit); K of 288 (a partial pass of the threads), 768 and 2048 (the 190M's and 1B's widths); N within a
// tile, odd, and the 1B's gate/up.
TEST(GpuSkinnyMatmul, AfterAResidualStepGivesTheStepKernelsAndTheProductsBits) {
  FATHOM_REQUIRE_GPU();
  SkinnySplitKCtasScope one_cta_a_tile(1);  // single calls that split K across CTAs differ in bits
  uint64_t seed = 300;
  struct Shape3 {
    int64_t m, k, n0, n1;
  };
  for (const Shape3 s :
       {Shape3{1, 2048, 8192, 8192}, Shape3{1, 2048, 37, 2048}, Shape3{1, 768, 3072, 100}, Shape3{1, 288, 16, 9}})
    for (const ResidualStep kind : {ResidualStep::post_norm, ResidualStep::pre_norm}) {
      const std::string what = label(s.m, s.k, s.n0, kind == ResidualStep::post_norm ? " post-norm" : " pre-norm");
      const GpuInput r = random_input({s.m, s.k}, DType::bf16, seed++),
                     x = random_input({s.m, s.k}, DType::bf16, seed++),
                     w = random_input({s.k}, DType::bf16, seed++, 0.5, 1.5);
      const GpuInput w0 = random_input({s.n0, s.k}, DType::bf16, seed++),
                     w1 = random_input({s.n1, s.k}, DType::bf16, seed++);
      const Tensor ws[2] = {w0.gpu, w1.gpu};
      const ResidualStepInputs step{kind, r.gpu, x.gpu, w.gpu, 1e-5};
      ASSERT_TRUE(residual_step_fits(step, ws)) << what;
      Tensor ys[2] = {nan_output(s.m, s.n0, DType::bf16), nan_output(s.m, s.n1, DType::bf16)};
      Tensor h = nan_output(s.m, s.k, DType::bf16);
      skinny_matmul_after_residual_step(step, ws, ys, h);
      // The step's kernel, then the grouped products.
      const auto [want_h, in] = step_by_its_kernel(step);
      Tensor want_ys[2] = {nan_output(s.m, s.n0, DType::bf16), nan_output(s.m, s.n1, DType::bf16)};
      skinny_matmul_grouped(in, ws, want_ys);
      EXPECT_TRUE(bitwise_equal(h, want_h)) << what << ": h";
      EXPECT_TRUE(bitwise_equal(ys[0], want_ys[0])) << what << ": first product";
      EXPECT_TRUE(bitwise_equal(ys[1], want_ys[1])) << what << ": second product";
      // And the CPU's step and products.
      Tensor cpu_ys[2] = {Tensor::empty({s.m, s.n0}, DType::bf16), Tensor::empty({s.m, s.n1}, DType::bf16)};
      Tensor cpu_h = Tensor::empty({s.m, s.k}, DType::bf16);
      const Tensor cpu_ws[2] = {w0.cpu.to(DType::bf16), w1.cpu.to(DType::bf16)};
      skinny_matmul_after_residual_step(
          {kind, r.cpu.to(DType::bf16), x.cpu.to(DType::bf16), w.cpu.to(DType::bf16), 1e-5}, cpu_ws, cpu_ys, cpu_h);
      EXPECT_GPU_CLOSE(h, cpu_h.to(DType::f32), DType::bf16, what + ": h against the CPU");
      EXPECT_GPU_CLOSE(ys[0], cpu_ys[0].to(DType::f32), DType::bf16, what + ": first product against the CPU");
      EXPECT_GPU_CLOSE(ys[1], cpu_ys[1].to(DType::f32), DType::bf16, what + ": second product against the CPU");
    }
}
