// CUDA kernels of the FP8 scaling ops. The amax is a max over |x|'s bit patterns (a non-negative float's
// bits order like its value, and a positive NaN's sit above +Inf's), so one integer atomicMax per block
// reduces it and NaN propagates. The casts read the amax from device memory and compute the scale
// themselves (fp8_scale.h), converting with CUDA's satfinite intrinsic: no host sync anywhere.
#include <cuda_fp8.h>

#include <algorithm>

#include "core/fp8.h"
#include "kernels/fp8/fp8.h"
#include "kernels/fp8/fp8_scale.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kAmaxThreads = 512;
constexpr int kTile = 32;     // the cast-transpose's tile: 32 x 32 elements
constexpr int kTileRows = 8;  // thread rows of a tile's block (each thread does 4 elements)
constexpr int kCastThreads = 256;

__device__ __forceinline__ unsigned int abs_bits(float v) { return __float_as_uint(fabsf(v)); }

template <typename T>
__global__ void __launch_bounds__(kAmaxThreads) amax_kernel(const T* x, int64_t n, unsigned int* amax_bits) {
  unsigned int best = 0;
  for (int64_t i = int64_t(blockIdx.x) * kAmaxThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kAmaxThreads)
    best = max(best, abs_bits(to_float(x[i])));
  for (int offset = 16; offset > 0; offset >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, offset));
  __shared__ unsigned int warps[kAmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = threadIdx.x < kAmaxThreads / 32 ? warps[threadIdx.x] : 0u;
    for (int offset = 16; offset > 0; offset >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, offset));
    if (threadIdx.x == 0 && best != 0) atomicMax(amax_bits, best);
  }
}

__device__ __forceinline__ __nv_fp8_interpretation_t interpretation(DType format) {
  return format == DType::e4m3 ? __NV_E4M3 : __NV_E5M2;
}

__device__ __forceinline__ uint8_t to_fp8(float v, float scale, __nv_fp8_interpretation_t kind) {
  return __nv_cvt_float_to_fp8(__fmul_rn(v, scale), __NV_SATFINITE, kind);
}

// Block 0's first thread writes the scale's inverse (every block computes the same scale).
__device__ __forceinline__ float scale_of(const float* amax, float fp8_max, float* scale_inv) {
  const float scale = fp8_scale_from_amax(*amax, fp8_max);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = fp8_scale_inv(scale);
  return scale;
}

template <typename T>
__global__ void __launch_bounds__(kCastThreads)
    cast_kernel(const T* x, int64_t n, const float* amax, DType format, float fp8_max, uint8_t* out, float* scale_inv) {
  const float scale = scale_of(amax, fp8_max, scale_inv);
  const __nv_fp8_interpretation_t kind = interpretation(format);
  for (int64_t i = int64_t(blockIdx.x) * kCastThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kCastThreads)
    out[i] = to_fp8(to_float(x[i]), scale, kind);
}

// One 32 x 32 tile per block: rows are read (and, when out is set, written) along the columns, then the
// tile goes through shared memory so the transpose is written along its rows too. Tiles past `rows`
// (up to the padded width of the transpose) write zeros there.
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    cast_transpose_kernel(const T* x, int64_t rows, int64_t cols, int64_t padded, const float* amax, DType format,
                          float fp8_max, uint8_t* out, uint8_t* out_t, float* scale_inv) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float scale = scale_of(amax, fp8_max, scale_inv);
  const __nv_fp8_interpretation_t kind = interpretation(format);
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = row0 + i, c = col0 + threadIdx.x;
    uint8_t code = 0;
    if (r < rows && c < cols) {
      code = to_fp8(to_float(x[r * cols + c]), scale, kind);
      if (out) out[r * cols + c] = code;
    }
    tile[i][threadIdx.x] = code;
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t c = col0 + i, r = row0 + threadIdx.x;
    if (c < cols && r < padded) out_t[c * padded + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

Tensor fp8_amax(const Tensor& x) {
  Tensor amax = Tensor::zeros({1}, DType::f32, x.device());
  if (x.numel() == 0) return amax;
  dispatch_device_float("fp8_amax", x.dtype(), [&]<typename T>() {
    amax_kernel<T><<<grid_for(x.numel(), kAmaxThreads * 8, 2048), kAmaxThreads, 0, stream_for(x.device())>>>(
        static_cast<const T*>(x.raw()), x.numel(), static_cast<unsigned int*>(amax.raw()));
    CUDA_CHECK_LAUNCH();
  });
  return amax;
}

void fp8_cast(const Tensor& x, const Tensor& amax, Tensor& data, Tensor& transposed, Tensor& scale_inv) {
  const DType format = data.defined() ? data.dtype() : transposed.dtype();
  const float format_max = fp8_max(format);
  const int64_t rows = x.dim(0), cols = x.dim(1);
  cudaStream_t stream = stream_for(x.device());
  const float* amax_p = static_cast<const float*>(amax.raw());
  float* scale_inv_p = static_cast<float*>(scale_inv.raw());
  uint8_t* out = data.defined() ? static_cast<uint8_t*>(data.raw()) : nullptr;
  dispatch_device_float("fp8_cast", x.dtype(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.raw());
    if (!transposed.defined()) {
      cast_kernel<T><<<grid_for(x.numel(), kCastThreads * 4), kCastThreads, 0, stream>>>(xp, x.numel(), amax_p, format,
                                                                                         format_max, out, scale_inv_p);
    } else {
      const int64_t padded = transposed.dim(1);
      FATHOM_CHECK((padded + kTile - 1) / kTile <= 65535, "fp8_cast_transpose: ", rows, " rows exceed the grid");
      const dim3 grid(unsigned(std::max<int64_t>((cols + kTile - 1) / kTile, 1)),
                      unsigned(std::max<int64_t>((padded + kTile - 1) / kTile, 1)));
      cast_transpose_kernel<T>
          <<<grid, dim3(kTile, kTileRows), 0, stream>>>(xp, rows, cols, padded, amax_p, format, format_max, out,
                                                        static_cast<uint8_t*>(transposed.raw()), scale_inv_p);
    }
    CUDA_CHECK_LAUNCH();
  });
}

void check_fp8_device(Device device) {
  const cudaDeviceProp& p = device_properties(device.index);
  FATHOM_CHECK(p.major * 10 + p.minor >= 89, "train.precision fp8 needs FP8 tensor cores (compute capability 8.9 or ",
               "newer: Ada, Hopper, Blackwell); ", device.str(), " (", p.name, ") has compute capability ", p.major,
               ".", p.minor, ". Use train.precision: bf16 on this GPU");
}

}  // namespace fathom::cuda
