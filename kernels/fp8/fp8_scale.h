// The scale rule of FP8 current scaling, shared by the CPU reference and the CUDA kernels so both compute
// the same float bit for bit: scale = fp8_max / amax (IEEE division, rounded to nearest), so the
// largest |x| lands on the format's max; 1 for an all-zero tensor; the largest float where amax is so
// small that the quotient overflows; NaN for a non-finite amax (fp8.h: it poisons the tensor).
#pragma once
#include <cfloat>
#include <cmath>

#ifdef __CUDACC__
#define FATHOM_HOST_DEVICE __host__ __device__
#else
#define FATHOM_HOST_DEVICE
#endif

namespace fathom {

FATHOM_HOST_DEVICE inline float fp8_scale_from_amax(float amax, float fp8_max) {
  if (!(amax <= FLT_MAX)) return NAN;  // NaN or +Inf
  if (amax == 0.0f) return 1.0f;
#ifdef __CUDA_ARCH__
  const float scale = __fdiv_rn(fp8_max, amax);  // IEEE division whatever the compiler flags
#else
  const float scale = fp8_max / amax;
#endif
  return scale <= FLT_MAX ? scale : FLT_MAX;
}

FATHOM_HOST_DEVICE inline float fp8_scale_inv(float scale) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(1.0f, scale);
#else
  return 1.0f / scale;
#endif
}

}  // namespace fathom
