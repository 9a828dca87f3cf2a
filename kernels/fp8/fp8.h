// FP8 per-tensor scaling (docs/DESIGN.md, "FP8 linears"): the amax of a tensor, the scaled cast to an FP8
// format, and the cast-transpose that also writes the transposed copy Hopper's FP8 GEMMs need (they take
// only the "TN" layout: both operands with the inner dimension contiguous).
//
// Scaling is current and per tensor: scale = fp8_max / amax, computed on the device from the amax the
// same step measured (fp8_scale.h), so no host sync and no state. A non-finite input poisons the whole
// tensor: the amax is NaN (any NaN) or +Inf (any infinity), the scale NaN, every code NaN (0x7F) and
// scale_inv NaN, so the GEMM's output, the loss or the gradients turn NaN and the run's non-finite
// check stops the step before the update, naming the step.
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// max |x| over every element of x (F32 or BF16, any shape) into a new F32 [1] tensor on x's device,
// without waiting for the device. NaN if any element is NaN, else +Inf if any is infinite.
Tensor fp8_amax(const Tensor& x);

// A tensor in an FP8 format with its per-tensor scale: x ~ data * scale_inv.
struct Fp8Tensor {
  Tensor data;        // [rows, cols] (absent when a cast-transpose was asked for the transpose only)
  Tensor transposed;  // [cols, round_up(rows, 16)]: data^T, zero past column rows (cast-transpose only)
  Tensor scale_inv;   // F32 [1]: 1 / scale
};

// Rows of the transposed copy are padded to this: cuBLASLt's FP8 GEMMs need the inner dimension (and
// so each row of an operand) to be a multiple of 16 bytes; the zeros add nothing to a product.
constexpr int64_t kFp8RowAlignment = 16;
int64_t fp8_padded(int64_t n);
// Whether a linear of these widths can run its GEMMs in FP8 (both multiples of kFp8RowAlignment).
inline bool fp8_linear_widths_aligned(int64_t out_features, int64_t in_features) {
  return out_features % kFp8RowAlignment == 0 && in_features % kFp8RowAlignment == 0;
}

// x [rows, cols] (F32 or BF16) times scale, converted to `format` (DType::e4m3 or DType::e5m2) with
// rounding to nearest even, saturating at +-fp8_max(format); amax is fp8_amax(x) (or a larger bound).
Fp8Tensor fp8_cast(const Tensor& x, const Tensor& amax, DType format);
// The same cast writing x^T as well (and, with keep_rows false, only x^T).
Fp8Tensor fp8_cast_transpose(const Tensor& x, const Tensor& amax, DType format, bool keep_rows = true);
// fp8_amax then the cast (transpose: the cast-transpose) of a tensor whose last dimension is cols.
Fp8Tensor fp8_quantize(const Tensor& x, DType format, bool transpose);

// FP8 compute needs FP8 tensor cores: compute capability 8.9 (Ada) or newer. A clear error naming the
// device and its capability otherwise; on the CPU nothing to check (the emulation runs anywhere).
void check_fp8_device(Device device);

// The backends' entry points. The cast writes data (when defined), transposed (when defined; its padding
// too) and scale_inv, all allocated by the caller.
using Fp8AmaxKernel = Tensor(const Tensor& x);
FATHOM_BACKENDS(Fp8AmaxKernel, fp8_amax)
using Fp8CastKernel = void(const Tensor& x, const Tensor& amax, Tensor& data, Tensor& transposed, Tensor& scale_inv);
FATHOM_BACKENDS(Fp8CastKernel, fp8_cast)
using Fp8DeviceCheckKernel = void(Device device);
FATHOM_BACKENDS(Fp8DeviceCheckKernel, check_fp8_device)

}  // namespace fathom
