// The CPU reference of the FP8 scaling ops, and with them FP8 emulation on the CPU: the same amax, scale
// and rounding as the CUDA kernels, bit for bit (the GPU tests compare them).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp8.h"
#include "kernels/dispatch.h"
#include "kernels/fp8/fp8.h"
#include "kernels/fp8/fp8_scale.h"

namespace fathom::cpu {

Tensor fp8_amax(const Tensor& x) {
  const Tensor values = x.to(DType::f32);
  const float* v = values.data<float>();
  // The max of |x|'s bit patterns: for non-negative floats their order is the values' order, and a
  // (positive) NaN sorts above +Inf, so NaN wins as the CUDA kernel's atomicMax makes it win.
  uint32_t best = 0;
  for (int64_t i = 0; i < values.numel(); ++i) {
    const float a = std::fabs(v[i]);
    uint32_t bits;
    std::memcpy(&bits, &a, 4);
    best = std::max(best, bits);
  }
  float amax;
  std::memcpy(&amax, &best, 4);
  return Tensor::from_vector<float>({amax}, {1});
}

void fp8_cast(const Tensor& x, const Tensor& amax, Tensor& data, Tensor& transposed, Tensor& scale_inv) {
  const DType format = data.defined() ? data.dtype() : transposed.dtype();
  const float scale = fp8_scale_from_amax(amax.data<float>()[0], fp8_max(format));
  scale_inv.data<float>()[0] = fp8_scale_inv(scale);
  const Tensor values = x.to(DType::f32);
  const float* v = values.data<float>();
  const int64_t rows = x.dim(0), cols = x.dim(1);
  uint8_t* out = data.defined() ? static_cast<uint8_t*>(data.raw()) : nullptr;
  uint8_t* out_t = transposed.defined() ? static_cast<uint8_t*>(transposed.raw()) : nullptr;
  const int64_t padded = transposed.defined() ? transposed.dim(1) : 0;
  if (out_t) std::memset(out_t, 0, size_t(transposed.nbytes()));  // the padding past column rows
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = float_to_fp8(v[r * cols + c] * scale, format);
      if (out) out[r * cols + c] = code;
      if (out_t) out_t[c * padded + r] = code;
    }
}

void check_fp8_device(Device device) {}

}  // namespace fathom::cpu
