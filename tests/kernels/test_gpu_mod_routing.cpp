// CUDA MoD routing against the CPU reference on awkward shapes (S not a multiple of 8 or 64, k = 1,
// k = S, B = 3), bit-for-bit repeats, and a MoD model trained on the GPU against the CPU's loss curve.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "autograd/grad_mode.h"
#include "kernels/mod/mod_routing.h"
#include "kernels/swiglu/swiglu.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/test_support.h"
#include "tests/support/training_losses.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// Scores with many exact ties (multiples of 1/4), so the tie rule is exercised.
Tensor tied_scores(int64_t B, int64_t S, uint64_t seed) {
  std::vector<double> u = values(random_tensor({B, S}, DType::f64, seed, -2, 2));
  std::vector<float> s;
  for (double v : u) s.push_back(float(std::round(v * 4) / 4));
  return Tensor::from_vector(s, {B, S});
}

}  // namespace

TEST(GpuModRouting, TopkMatchesTheCpuExactly) {
  FATHOM_REQUIRE_GPU();
  for (const auto& [S, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {13, 1}, {13, 13}, {67, 9}, {130, 17}, {1031, 129}, {2048, 256}, {5000, 625}, {20000, 2500}}) {
    for (const bool ties : {true, false}) {
      const Tensor s = ties ? tied_scores(3, S, uint64_t(S + k)) : random_tensor({3, S}, DType::f32, uint64_t(S));
      const Tensor got = topk_per_sequence(s.to(kGpu), k);
      EXPECT_EQ(got.to_vector<int32_t>(), topk_per_sequence(s, k).to_vector<int32_t>()) << "S " << S << " k " << k;
      EXPECT_TRUE(bitwise_equal(got, topk_per_sequence(s.to(kGpu), k)));
    }
  }
  const float nan = std::nanf("");
  const Tensor special = Tensor::from_vector(std::vector<float>{0.0f, -0.0f, nan, 1.0f, nan, -INFINITY}, {1, 6});
  EXPECT_EQ(topk_per_sequence(special.to(kGpu), 3).to_vector<int32_t>(), (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(topk_per_sequence(special.to(kGpu), 4).to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 3, 4}));
}

TEST(GpuModRouting, GatherScatterAndMixMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (const DType dt : {DType::f32, DType::bf16})
    for (const auto& [S, k, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {13, 1, 16}, {13, 13, 24}, {67, 9, 3}, {130, 17, 768}, {257, 33, 1000}}) {
      const std::string what = std::string(dtype_name(dt)) + " S " + std::to_string(S) + " k " + std::to_string(k);
      const Tensor scores = random_tensor({3, S}, DType::f32, uint64_t(S), -3, 3);
      const Tensor idx = topk_per_sequence(scores, k), idx_gpu = idx.to(kGpu);
      const GpuInput x = random_input({3, S, d}, dt, 1), y = random_input({3, k, d}, dt, 2);
      const GpuInput g = random_input({3, S, d}, dt, 3);
      const Tensor rows = gather_rows(x.gpu, idx_gpu);
      EXPECT_TRUE(bitwise_equal(rows.to(DType::f32), gather_rows(x.cpu, idx))) << what;
      EXPECT_TRUE(bitwise_equal(scatter_rows(y.gpu, idx_gpu, S).to(DType::f32), scatter_rows(y.cpu, idx, S))) << what;
      for (const RouteWeight weight : {RouteWeight::identity, RouteWeight::sigmoid, RouteWeight::one}) {
        const Tensor r = scores.to(kGpu);
        const Tensor out = routed_mix_forward(x.gpu, y.gpu, r, idx_gpu, weight);
        EXPECT_GPU_CLOSE(out, routed_mix_forward(x.cpu, y.cpu, scores, idx, weight), dt, what + " out");
        const RoutedMixGrads got = routed_mix_backward(g.gpu, x.gpu, y.gpu, r, idx_gpu, weight);
        const RoutedMixGrads want = routed_mix_backward(g.cpu, x.cpu, y.cpu, scores, idx, weight);
        EXPECT_GPU_CLOSE(got.dx, want.dx, dt, what + " dx");
        EXPECT_GPU_CLOSE(got.dy, want.dy, dt, what + " dy");
        if (weight != RouteWeight::one) {
          EXPECT_GPU_CLOSE(got.dr, want.dr, dt, what + " dr");
          EXPECT_TRUE(bitwise_equal(got.dr, routed_mix_backward(g.gpu, x.gpu, y.gpu, r, idx_gpu, weight).dr));
        }
      }
    }
}

TEST(GpuModRouting, BceAndSiluMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (const int64_t n : {1, 7, 1031, 70000}) {
    const Tensor l = random_tensor({n}, DType::f32, uint64_t(n), -20, 20);
    const Tensor t = random_ints({n}, 2, uint64_t(n) + 1).to(DType::f32);
    const Tensor loss = routing_bce_forward(l.to(kGpu), t.to(kGpu));
    EXPECT_NEAR(loss.to(Device::cpu()).item(), routing_bce_forward(l, t).item(),
                1e-5 * (1 + routing_bce_forward(l, t).item()));
    const Tensor dl = routing_bce_backward(Tensor::full(Shape{}, 0.5, DType::f32, kGpu), l.to(kGpu), t.to(kGpu));
    EXPECT_GPU_CLOSE(dl, routing_bce_backward(Tensor::full(Shape{}, 0.5, DType::f32), l, t), DType::f32, "dlogits");
  }
  for (const DType dt : {DType::f32, DType::bf16}) {
    const GpuInput x = random_input({5, 1031}, dt, 4, -8, 8), dy = random_input({5, 1031}, dt, 5);
    EXPECT_GPU_CLOSE(silu_forward(x.gpu), silu_forward(x.cpu), dt, "silu");
    EXPECT_GPU_CLOSE(silu_backward(dy.gpu, x.gpu), silu_backward(dy.cpu, x.cpu), dt, "silu backward");
  }
}

TEST(GpuModRouting, OutOfRangeIndexIsReported) {
  FATHOM_REQUIRE_GPU();
  const Tensor x = Tensor::zeros({1, 4, 8}, DType::f32, kGpu);
  const Tensor bad = Tensor::from_vector(std::vector<int32_t>{5}, {1, 1}).to(kGpu);
  fathom::testing::expect_error([&] { gather_rows(x, bad).to(Device::cpu()); }, {"MoD routing: index 5", "[0, 4)"});
}

TEST(GpuModTraining, MoDStepsMatchTheCpuLossCurve) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::string model =
      "model: {d_model: 64, n_layers: 4, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n"
      "mod: {capacity: 0.5, every: 2, router_weight: sigmoid}\n";
  const std::vector<double> cpu = tiny_training_losses(dir / "cpu", "cpu", model);
  ASSERT_EQ(cpu.size(), 20u);
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::vector<double> gpu = tiny_training_losses(dir / ("gpu-" + precision), "cuda", model, 20, precision);
    ASSERT_EQ(gpu.size(), 20u);
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_NEAR(gpu[i], cpu[i], 3e-2 * cpu[i]) << precision << " step " << i + 1;
      worst = std::max(worst, std::abs(gpu[i] - cpu[i]) / cpu[i]);
    }
    std::printf("MoD %s: largest relative loss difference to the CPU over 20 steps: %.2e\n", precision.c_str(), worst);
    EXPECT_LT(gpu.back(), gpu.front() - 0.5) << precision;
    // Same bits twice.
    EXPECT_EQ(tiny_training_losses(dir / ("gpu-again-" + precision), "cuda", model, 20, precision), gpu) << precision;
  }
}
