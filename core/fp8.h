// The two 8-bit float formats of FP8 training (OCP 8-bit floating point, as Hopper's tensor cores read them):
//
//   e4m3 (E4M3FN): 1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448, subnormals down to 2^-9; no
//                  infinity, NaN = 0x7F / 0xFF. Weights and activations.
//   e5m2:          1 sign, 5 exponent (bias 15), 2 mantissa bits; max 57344, subnormals down to 2^-16;
//                  infinity 0x7C / 0xFC, NaN above it. Gradients (more range, less precision).
//
// float -> fp8 rounds to nearest even and saturates: a finite value beyond the format's max, and infinity,
// become +-max (CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)); NaN becomes 0x7F; a value that
// rounds to zero keeps its sign. The CUDA kernels convert with that intrinsic, and the tests check
// that both agree bit for bit.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace fathom {

// The largest finite value of an FP8 dtype (448 or 57344).
float fp8_max(DType format);
uint8_t float_to_fp8(float x, DType format);
float fp8_to_float(uint8_t code, DType format);

}  // namespace fathom
