// CUDA AdamW against the CPU reference: one fused launch over several weight-decay ranges of a flat
// arena (gaps left untouched), the bf16 compute copy written in the same pass, several steps.
#include "kernels/adamw/adamw.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuAdamW, RangesAndComputeCopyMatchTheCpuOverSeveralSteps) {
  FATHOM_REQUIRE_GPU();
  const int64_t n = 1'000'003;
  const std::vector<AdamWRange> ranges = {{0, 1000, 0.1},
                                          {1000, 1001, 0.0},
                                          {1001, 500'000, 0.1},
                                          {500'017, 999'999, 0.0}};  // [500000, 500017) and the tail untouched
  Tensor p = random_tensor({n}, DType::f32, 1), m = random_tensor({n}, DType::f32, 2, -1e-3, 1e-3),
         v = random_tensor({n}, DType::f32, 3, 0, 1e-4);
  Tensor pg = p.to(kGpu), mg = m.to(kGpu), vg = v.to(kGpu);
  Tensor copy = Tensor::full({n}, 9.0, DType::bf16, kGpu), copy_cpu = Tensor::full({n}, 9.0, DType::bf16);
  for (int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor({n}, DType::f32, 10 + uint64_t(step), -1e-2, 1e-2);
    // Step 2 clips: its gradients are scaled as they are read.
    const AdamWStep cfg{1e-3 * double(step), 0.9, 0.95, 1e-8, 0.0, step, step == 2 ? 0.37 : 1.0};
    adamw_update_ranges(pg, g.to(kGpu), mg, vg, ranges, cfg, &copy);
    adamw_update_ranges(p, g, m, v, ranges, cfg, &copy_cpu);
  }
  EXPECT_GPU_CLOSE(pg, p, DType::f32, "param");
  EXPECT_GPU_CLOSE(mg, m, DType::f32, "exp_avg");
  EXPECT_GPU_CLOSE(vg, v, DType::f32, "exp_avg_sq");
  EXPECT_GPU_CLOSE(copy, copy_cpu, DType::bf16, "bf16 copy");
  // The copy is the rounded parameters inside the ranges and untouched (9) outside them.
  const std::vector<double> c = values(copy.to(Device::cpu()));
  EXPECT_EQ(c[500'005], 9.0);
  EXPECT_EQ(c[size_t(n - 1)], 9.0);
  EXPECT_TRUE(bitwise_equal(copy.narrow(0, 1000), pg.narrow(0, 1000).to(DType::bf16)));
}

TEST(GpuAdamW, PlainUpdateMatchesTheCpuAndManyRangesSplitIntoLaunches) {
  FATHOM_REQUIRE_GPU();
  const int64_t n = 70'001;
  Tensor p = random_tensor({n}, DType::f32, 4), g = random_tensor({n}, DType::f32, 5);
  Tensor m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
  Tensor pg = p.to(kGpu), mg = m.to(kGpu), vg = v.to(kGpu);
  const AdamWStep cfg{3e-4, 0.9, 0.95, 1e-8, 0.1, 1};
  adamw_update(pg, g.to(kGpu), mg, vg, cfg);
  adamw_update(p, g, m, v, cfg);
  EXPECT_GPU_CLOSE(pg, p, DType::f32, "param");
  // 150 ranges: more than one launch's table holds.
  std::vector<AdamWRange> ranges;
  for (int64_t b = 0; b + 400 <= n; b += 450) ranges.push_back({b, b + 400, (b / 450) % 2 ? 0.1 : 0.0});
  ASSERT_GT(ranges.size(), 150u);
  const AdamWStep cfg2{1e-3, 0.9, 0.95, 1e-8, 0.0, 2};
  adamw_update_ranges(pg, g.to(kGpu), mg, vg, ranges, cfg2);
  adamw_update_ranges(p, g, m, v, ranges, cfg2);
  EXPECT_GPU_CLOSE(pg, p, DType::f32, "param, many ranges");
  EXPECT_GPU_CLOSE(vg, v, DType::f32, "exp_avg_sq, many ranges");
}

TEST(GpuAdamW, BadRangesAreErrors) {
  const int64_t n = 100;
  Tensor p = Tensor::zeros({n}, DType::f32), g = Tensor::zeros({n}, DType::f32), m = p.clone(), v = p.clone();
  const AdamWStep cfg;
  expect_error([&] { adamw_update_ranges(p, g, m, v, {{0, 50, 0.1}, {40, 60, 0.0}}, cfg); }, {"range 1", "[40, 60)"});
  expect_error([&] { adamw_update_ranges(p, g, m, v, {{0, 101, 0.1}}, cfg); }, {"range 0", "100 parameters"});
  expect_error([&] { adamw_update_ranges(p, g, m, v, {{0, 10, -1.0}}, cfg); }, {"range 0", "weight_decay"});
  Tensor small = Tensor::zeros({10}, DType::bf16);
  expect_error([&] { adamw_update_ranges(p, g, m, v, {{0, 10, 0.1}}, cfg, &small); }, {"compute_copy", "100 elements"});
}
