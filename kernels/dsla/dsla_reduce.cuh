// The DSLA backward's last sums, shared by the SIMT and the tensor-core kernels: dk and dv of each KV head
// from per-query-head (and per-key-slice) fp32 partials, and dgamma from per-block partials. Each output
// element is summed by one thread in a fixed order, so runs are bit-identical.
#pragma once
#include <cstdint>

#include "kernels/runtime/device_math.cuh"

namespace fathom::cuda::dsla {

// dk[r, hk] = sum over the G query heads g of hk of dk_heads[r, hk G + g] (when reduce_dk); dv[r, hk] =
// the same sum of dv_parts over the heads and the `slices` partials [slices][rows][Hk G][D].
template <typename T>
__global__ void reduce_kv_kernel(const float* __restrict__ dk_heads, const float* __restrict__ dv_parts,
                                 T* __restrict__ dk, T* __restrict__ dv, int64_t rows, int Hk, int G, int D, int slices,
                                 bool reduce_dk) {
  const int64_t n = rows * Hk * D, stride_part = rows * Hk * G * D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (int64_t(Hk) * D);
    const int hk = int(i / D % Hk), e = int(i % D);
    float sk = 0.0f, sv = 0.0f;
    for (int g = 0; g < G; ++g) {
      const int64_t src = (r * Hk * G + int64_t(hk) * G + g) * D + e;
      if (reduce_dk) sk += dk_heads[src];
      for (int p = 0; p < slices; ++p) sv += dv_parts[p * stride_part + src];
    }
    if (reduce_dk) dk[i] = from_float<T>(sk);
    dv[i] = from_float<T>(sv);
  }
}

// dgamma[h] = the sum of parts[b, h, 0..parts_per_head) over b.
template <typename T = float>
__global__ void reduce_dgamma_kernel(const T* __restrict__ parts, T* __restrict__ dgamma, int64_t B, int H,
                                     int parts_per_head) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= H) return;
  T s = T(0);
  for (int64_t b = 0; b < B; ++b)
    for (int p = 0; p < parts_per_head; ++p) s += parts[(b * H + h) * parts_per_head + p];
  dgamma[h] = s;
}

}  // namespace fathom::cuda::dsla
