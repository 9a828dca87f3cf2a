// linear_fp8 on the GPU against the CPU emulation: forward, dx and dW (into an F32 gradient as mixed
// precision's arena takes it) on shapes whose token count is not a multiple of 16.
#include <gtest/gtest.h>

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
