#include "kernels/matmul/fp8_matmul.h"

#include "kernels/dispatch.h"

namespace fathom {

void fp8_matmul(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv, Tensor& c,
                Fp8GemmOptions options) {
  FATHOM_CHECK(a.defined() && b.defined() && c.defined() && a_scale_inv.defined() && b_scale_inv.defined(),
               "fp8_matmul: undefined operand");
  FATHOM_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, "fp8_matmul: operands must be 2-D, got a ", describe(a),
               ", b ", describe(b), ", c ", describe(c));
  FATHOM_CHECK(is_fp8(a.dtype()) && is_fp8(b.dtype()), "fp8_matmul: a and b must be F8_E4M3 or F8_E5M2, got a ",
               describe(a), ", b ", describe(b));
  FATHOM_CHECK(!(a.dtype() == DType::e5m2 && b.dtype() == DType::e5m2),
               "fp8_matmul: a and b are both F8_E5M2; one of them must be F8_E4M3 (no FP8 GEMM takes two E5M2 "
               "operands)");
  for (const Tensor* s : {&a_scale_inv, &b_scale_inv})
    FATHOM_CHECK(s->dtype() == DType::f32 && s->numel() == 1, "fp8_matmul: a scale_inv must be F32 [1], got ",
                 describe(*s));
  FATHOM_CHECK(a.dim(1) == b.dim(1), "fp8_matmul: a ", describe(a), " and b ", describe(b),
               " must have the same inner (last) dimension: c = a b^T");
  FATHOM_CHECK(c.dim(0) == a.dim(0) && c.dim(1) == b.dim(0), "fp8_matmul: output ", describe(c), " should be [",
               a.dim(0), ", ", b.dim(0), "]");
  FATHOM_CHECK(c.dtype() == DType::f32 || c.dtype() == DType::bf16, "fp8_matmul: the output must be F32 or BF16, got ",
               describe(c));
  const Device device = common_device("fp8_matmul", {&a, &b, &c, &a_scale_inv, &b_scale_inv});
  if (device.is_cpu()) {
    FATHOM_CHECK(c.dtype() == DType::f32, "fp8_matmul: the CPU emulation writes F32, got ", describe(c));
  } else {
    const int64_t k = a.dim(1), n = b.dim(0);
    FATHOM_CHECK(k % 16 == 0 && n % 16 == 0, "fp8_matmul: cuBLASLt's FP8 GEMMs need the inner dimension (", k,
                 ") and the rows of b (", n, ") to be multiples of 16");
  }
  on_device("fp8_matmul", device, FATHOM_KERNEL(fp8_matmul), a, a_scale_inv, b, b_scale_inv, c, options);
}

}  // namespace fathom
