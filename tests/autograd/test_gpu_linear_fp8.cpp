// linear_fp8 on the GPU against the CPU emulation: forward, dx and dW (into an F32 gradient as mixed
// precision's arena takes it) on shapes whose token count is not a multiple of 16.
#include <gtest/gtest.h>

#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuLinearFp8, MatchesTheCpuEmulation) {
  FATHOM_REQUIRE_GPU();
  struct Case {
    Shape x;
    int64_t out;
  };
  for (const Case& c : {Case{{2, 37, 64}, 96}, Case{{1, 1, 32}, 16}, Case{{4, 509, 256}, 768}, Case{{3, 16, 128}, 48}})
    for (DType dt : {DType::f32, DType::bf16}) {
      const std::string what = c.x.str() + " -> " + std::to_string(c.out) + " " + dtype_name(dt);
      const GpuInput x = random_input(c.x, dt, 1), w = random_input({c.out, c.x.last()}, dt, 2, -0.1, 0.1);
      std::vector<int64_t> out_dims = c.x.vec();
      out_dims.back() = c.out;
      const GpuInput g = random_input(Shape(out_dims), dt, 3);
      Variable xg(x.gpu, true), wg(w.gpu, true), xc(x.cpu, true), wc(w.cpu, true);
      const Variable yg = linear_fp8(xg, wg), yc = linear_fp8(xc, wc);
      backward(yg, g.gpu);
      backward(yc, g.cpu);
      // Both quantize the same values identically; the GEMMs differ in accumulation order and output rounding.
      EXPECT_LE(relative_l2(yg.value(), yc.value()), dt == DType::bf16 ? 1e-2 : 2e-3) << what << " y";
      EXPECT_LE(relative_l2(xg.grad(), xc.grad()), dt == DType::bf16 ? 1e-2 : 1e-4) << what << " dx";
      EXPECT_LE(relative_l2(wg.grad(), wc.grad()), dt == DType::bf16 ? 1e-2 : 1e-4) << what << " dW";
    }
}

// The FP8 linears of one input share its casts on the GPU as on the CPU: outputs and gradients are those
// of one linear_fp8 per weight, bit for bit.
TEST(GpuLinearFp8, EachSharesTheInputsCastsBitForBit) {
  FATHOM_REQUIRE_GPU();
  const GpuInput x = random_input({3, 37, 256}, DType::bf16, 10);
  const std::vector<int64_t> outs{256, 64, 64};
  Variable x_each(x.gpu, true), x_one(x.gpu, true);
  std::vector<Variable> w_each, w_one;
  for (size_t i = 0; i < outs.size(); ++i) {
    const GpuInput w = random_input({outs[i], 256}, DType::bf16, 11 + i, -0.1, 0.1);
    w_each.emplace_back(w.gpu, true);
    w_one.emplace_back(w.gpu.clone(), true);
  }
  const Variable* each[] = {&w_each[0], &w_each[1], &w_each[2]};
  const std::vector<Variable> y_each = linear_fp8_each(x_each, each);
  for (size_t i = 0; i < outs.size(); ++i) {
    const Variable y_one = linear_fp8(x_one, w_one[i]);
    EXPECT_TRUE(bitwise_equal(y_each[i].value(), y_one.value())) << "output " << i;
    const GpuInput g = random_input({3, 37, outs[i]}, DType::bf16, 20 + i);
    backward(y_each[i], g.gpu);
    backward(y_one, g.gpu);
    EXPECT_TRUE(bitwise_equal(w_each[i].grad(), w_one[i].grad())) << "dW " << i;
  }
  EXPECT_TRUE(bitwise_equal(x_each.grad(), x_one.grad())) << "dx";
}
