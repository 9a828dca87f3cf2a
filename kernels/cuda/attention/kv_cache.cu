// One launch for a whole append: a thread per 16-byte (or 4-byte) unit of the new rows.
#include "kernels/cuda/runtime/device_errors.cuh"
#include "kernels/cuda/runtime/device_math.cuh"
#include "kernels/cuda/runtime/runtime.h"
#include "kernels/kv_cache.h"

namespace fathom::cuda {

namespace {

template <typename Unit>
__global__ void kv_cache_write_kernel(Unit* cache, const Unit* rows, int64_t Tq, int64_t Hk, int64_t capacity,
                                      int64_t start, int64_t row_units, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t unit = i % row_units, row = i / row_units;  // row = (b * Tq + t) * Hk + h
    const int64_t h = row % Hk, t = (row / Hk) % Tq, b = row / (Hk * Tq);
    cache[((b * Hk + h) * capacity + start + t) * row_units + unit] = rows[i];
  }
}

template <typename Unit>
void launch(Tensor& cache, const Tensor& rows, int64_t start, size_t row_bytes) {
  const int64_t row_units = int64_t(row_bytes / sizeof(Unit)), total = rows.numel() / rows.dim(3) * row_units;
  kv_cache_write_kernel<Unit><<<grid_for(total, 256), 256, 0, stream_for(cache.device())>>>(
      static_cast<Unit*>(cache.raw()), static_cast<const Unit*>(rows.raw()), rows.dim(1), rows.dim(2), cache.dim(2),
      start, row_units, total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start) {
  const size_t row_bytes = size_t(rows.dim(3)) * dtype_size(rows.dtype());
  const bool wide = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(cache.raw()) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(rows.raw()) % 16 == 0;
  if (wide) return launch<uint4>(cache, rows, start, row_bytes);
  if (row_bytes % 2 == 0) return launch<uint16_t>(cache, rows, start, row_bytes);
  launch<uint8_t>(cache, rows, start, row_bytes);
}

}  // namespace fathom::cuda
