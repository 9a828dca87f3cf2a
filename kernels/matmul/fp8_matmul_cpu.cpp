// FP8 emulation of the FP8 GEMM: the codes' values multiplied in f32, then scaled by a_scale_inv *
// b_scale_inv, the order cuBLASLt applies the scales in (D = scale_a scale_b (A B) + beta C).
#include <array>

#include "core/fp8.h"
#include "kernels/dispatch.h"
#include "kernels/matmul/fp8_matmul.h"
#include "kernels/matmul/matmul.h"

namespace fathom::cpu {

namespace {

Tensor code_values(const Tensor& q) {
  std::array<float, 256> value_of{};
  for (int code = 0; code < 256; ++code) value_of[size_t(code)] = fp8_to_float(uint8_t(code), q.dtype());
  Tensor out = Tensor::empty(q.shape(), DType::f32);
  const auto* codes = static_cast<const uint8_t*>(q.raw());
  float* v = out.data<float>();
  for (int64_t i = 0; i < q.numel(); ++i) v[i] = value_of[codes[i]];
  return out;
}

}  // namespace

void fp8_matmul(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv, Tensor& c,
                Fp8GemmOptions options) {
  const float scale = a_scale_inv.data<float>()[0] * b_scale_inv.data<float>()[0];
  ::fathom::matmul(code_values(a), false, code_values(b), true, c, double(scale), options.accumulate ? 1.0 : 0.0);
}

}  // namespace fathom::cpu
