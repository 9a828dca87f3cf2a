#include "kernels/fp8/fp8.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {

void check_input(const char* op, const Tensor& x) {
  FATHOM_CHECK(x.defined() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16), op,
               ": x must be F32 or BF16, got ", x.defined() ? describe(x) : std::string("an undefined tensor"));
}

Fp8Tensor cast(const char* op, const Tensor& x, const Tensor& amax, DType format, bool rows_out, bool transposed_out) {
  check_input(op, x);
  FATHOM_CHECK(x.rank() == 2, op, ": x must be 2-D [rows, cols], got ", describe(x));
  FATHOM_CHECK(is_fp8(format), op, ": the format must be F8_E4M3 or F8_E5M2, got ", dtype_name(format));
  FATHOM_CHECK(amax.defined() && amax.dtype() == DType::f32 && amax.numel() == 1, op, ": amax must be F32 [1], got ",
               amax.defined() ? describe(amax) : std::string("an undefined tensor"));
  const Device device = common_device(op, {&x, &amax});
  const int64_t rows = x.dim(0), cols = x.dim(1);
  Fp8Tensor out;
  if (rows_out) out.data = Tensor::empty({rows, cols}, format, device);
  if (transposed_out) out.transposed = Tensor::empty({cols, fp8_padded(rows)}, format, device);
  out.scale_inv = Tensor::empty({1}, DType::f32, device);
  on_device(op, device, FATHOM_KERNEL(fp8_cast), x, amax, out.data, out.transposed, out.scale_inv);
  return out;
}

}  // namespace

int64_t fp8_padded(int64_t n) { return (n + kFp8RowAlignment - 1) / kFp8RowAlignment * kFp8RowAlignment; }

Tensor fp8_amax(const Tensor& x) {
  check_input("fp8_amax", x);
  return on_device("fp8_amax", x.device(), FATHOM_KERNEL(fp8_amax), x);
}

Fp8Tensor fp8_cast(const Tensor& x, const Tensor& amax, DType format) {
  return cast("fp8_cast", x, amax, format, true, false);
}

Fp8Tensor fp8_cast_transpose(const Tensor& x, const Tensor& amax, DType format, bool keep_rows) {
  return cast("fp8_cast_transpose", x, amax, format, keep_rows, true);
}

Fp8Tensor fp8_quantize(const Tensor& x, DType format, bool transpose) {
  check_input("fp8_quantize", x);
  FATHOM_CHECK(x.rank() >= 1, "fp8_quantize: x must have a last dimension, got ", describe(x));
  const Tensor x2d = x.view({x.shape().rows(), x.shape().last()});
  const Tensor amax = fp8_amax(x2d);
  return transpose ? fp8_cast_transpose(x2d, amax, format) : fp8_cast(x2d, amax, format);
}

void check_fp8_device(Device device) { on_device("check_fp8_device", device, FATHOM_KERNEL(check_fp8_device), device); }

}  // namespace fathom
