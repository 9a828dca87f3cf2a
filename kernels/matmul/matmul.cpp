#include "kernels/matmul/matmul.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {
int64_t rows_of(const Tensor& t, bool transpose) { return transpose ? t.dim(1) : t.dim(0); }
int64_t cols_of(const Tensor& t, bool transpose) { return transpose ? t.dim(0) : t.dim(1); }
}  // namespace

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha,
            double beta) {
  FATHOM_CHECK(a.defined() && b.defined() && c.defined(), "matmul: undefined operand");
  FATHOM_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, "matmul: operands must be 2-D, got a ", describe(a),
               ", b ", describe(b), ", c ", describe(c));
  // One dtype, or (CUDA) BF16 operands into an F32 output: mixed precision's fp32 weight gradients.
  const bool bf16_into_f32 = a.dtype() == DType::bf16 && b.dtype() == DType::bf16 && c.dtype() == DType::f32;
  FATHOM_CHECK(a.dtype() == b.dtype() && (a.dtype() == c.dtype() || bf16_into_f32), "matmul: dtypes differ: a ",
               describe(a), ", b ", describe(b), ", c ", describe(c),
               " (one dtype, or BF16 operands with an F32 output on CUDA)");
  FATHOM_CHECK(is_floating(a.dtype()), "matmul: needs floating operands, got ", describe(a));
  const int64_t m = rows_of(a, transpose_a), k = cols_of(a, transpose_a);
  FATHOM_CHECK(rows_of(b, transpose_b) == k, "matmul: inner dimensions differ: op(a) is [", m, ", ", k,
               "] but op(b) is [", rows_of(b, transpose_b), ", ", cols_of(b, transpose_b), "]");
  const int64_t n = cols_of(b, transpose_b);
  FATHOM_CHECK(c.dim(0) == m && c.dim(1) == n, "matmul: output ", describe(c), " should be [", m, ", ", n, "]");
  FATHOM_CHECK(!c.shares_storage_with(a) && !c.shares_storage_with(b),
               "matmul: the output must not share storage with an input");
  const Device device = common_device("matmul", {&a, &b, &c});
  if (device.is_cpu())
    FATHOM_CHECK(!bf16_into_f32,
                 "matmul: BF16 operands with an F32 output are a CUDA-only combination; the CPU "
                 "reference computes in F32 or F64");
  return on_device("matmul", device, FATHOM_KERNEL(matmul), a, transpose_a, b, transpose_b, c, alpha, beta);
}

Tensor matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b) {
  FATHOM_CHECK(a.defined() && b.defined() && a.rank() == 2 && b.rank() == 2, "matmul: operands must be 2-D, got a ",
               describe(a), ", b ", describe(b));
  Tensor c = Tensor::empty({rows_of(a, transpose_a), cols_of(b, transpose_b)}, a.dtype(), a.device());
  matmul(a, transpose_a, b, transpose_b, c, 1.0, 0.0);
  return c;
}

}  // namespace fathom
