#include "kernels/matmul/matmul.h"

#include <string>

#include "kernels/dispatch.h"

namespace fathom {

namespace {
int64_t rows_of(const Tensor& t, bool transpose) { return transpose ? t.dim(1) : t.dim(0); }
int64_t cols_of(const Tensor& t, bool transpose) { return transpose ? t.dim(0) : t.dim(1); }
}  // namespace

namespace {

// The checks of matmul's arguments; returns their device.
Device check_matmul(const char* op, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                    const Tensor& c) {
  FATHOM_CHECK(a.defined() && b.defined() && c.defined(), op, ": undefined operand");
  FATHOM_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, op, ": operands must be 2-D, got a ", describe(a),
               ", b ", describe(b), ", c ", describe(c));
  // One dtype, or (CUDA) BF16 operands into an F32 output: mixed precision's fp32 weight gradients.
  const bool bf16_into_f32 = a.dtype() == DType::bf16 && b.dtype() == DType::bf16 && c.dtype() == DType::f32;
  FATHOM_CHECK(a.dtype() == b.dtype() && (a.dtype() == c.dtype() || bf16_into_f32), op, ": dtypes differ: a ",
               describe(a), ", b ", describe(b), ", c ", describe(c),
               " (one dtype, or BF16 operands with an F32 output on CUDA)");
  FATHOM_CHECK(is_floating(a.dtype()), op, ": needs floating operands, got ", describe(a));
  const int64_t m = rows_of(a, transpose_a), k = cols_of(a, transpose_a);
  FATHOM_CHECK(rows_of(b, transpose_b) == k, op, ": inner dimensions differ: op(a) is [", m, ", ", k,
               "] but op(b) is [", rows_of(b, transpose_b), ", ", cols_of(b, transpose_b), "]");
  const int64_t n = cols_of(b, transpose_b);
  FATHOM_CHECK(c.dim(0) == m && c.dim(1) == n, op, ": output ", describe(c), " should be [", m, ", ", n, "]");
  FATHOM_CHECK(!c.shares_storage_with(a) && !c.shares_storage_with(b), op,
               ": the output must not share storage with an input");
  const Device device = common_device(op, {&a, &b, &c});
  if (device.is_cpu())
    FATHOM_CHECK(!bf16_into_f32, op,
                 ": BF16 operands with an F32 output are a CUDA-only combination; the CPU "
                 "reference computes in F32 or F64");
  return device;
}

}  // namespace

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha,
            double beta) {
  const Device device = check_matmul("matmul", a, transpose_a, b, transpose_b, c);
  return on_device("matmul", device, FATHOM_KERNEL(matmul), a, transpose_a, b, transpose_b, c, alpha, beta);
}

void matmul_each(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs) {
  FATHOM_CHECK(bs.size() == cs.size() && !bs.empty(), "matmul_each: one output per weight, got ", bs.size(),
               " weights and ", cs.size(), " outputs");
  Device device = Device::cpu();
  for (size_t i = 0; i < bs.size(); ++i) {
    const Device here = check_matmul("matmul_each", a, false, bs[i], true, cs[i]);
    FATHOM_CHECK(i == 0 || here == device, "matmul_each: weight ", i, " is on ", here.str(), ", the first on ",
                 device.str());
    device = here;
    for (size_t j = 0; j < i; ++j)
      FATHOM_CHECK(!cs[i].shares_storage_with(cs[j]), "matmul_each: outputs ", j, " and ", i, " share storage");
  }
  on_device("matmul_each", device, FATHOM_KERNEL(matmul_each), a, bs, cs);
}

Tensor matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b) {
  FATHOM_CHECK(a.defined() && b.defined() && a.rank() == 2 && b.rank() == 2, "matmul: operands must be 2-D, got a ",
               describe(a), ", b ", describe(b));
  Tensor c = Tensor::empty({rows_of(a, transpose_a), cols_of(b, transpose_b)}, a.dtype(), a.device());
  matmul(a, transpose_a, b, transpose_b, c, 1.0, 0.0);
  return c;
}

}  // namespace fathom
