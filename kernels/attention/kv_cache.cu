// One launch for a whole append: a thread per 16-byte (or 4-byte) unit of the new rows; and decoding's
// position count on the device.
#include "kernels/attention/kv_cache.h"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

// start_at: where the step's first position is, read on the device (null: `start`).
template <typename Unit>
__global__ void kv_cache_write_kernel(Unit* cache, const Unit* rows, int64_t Tq, int64_t Hk, int64_t capacity,
                                      int64_t start, const int32_t* start_at, int64_t row_units, int64_t total) {
  if (start_at) start = *start_at;
  if (start < 0 || start + Tq > capacity) return;  // never out of bounds (the host checks its own count)
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t unit = i % row_units, row = i / row_units;  // row = (b * Tq + t) * Hk + h
    const int64_t h = row % Hk, t = (row / Hk) % Tq, b = row / (Hk * Tq);
    cache[((b * Hk + h) * capacity + start + t) * row_units + unit] = rows[i];
  }
}

template <typename Unit>
void launch(Tensor& cache, const Tensor& rows, int64_t start, const int32_t* start_at, size_t row_bytes) {
  const int64_t row_units = int64_t(row_bytes / sizeof(Unit)), total = rows.numel() / rows.dim(3) * row_units;
  kv_cache_write_kernel<Unit><<<grid_for(total, 256), 256, 0, stream_for(cache.device())>>>(
      static_cast<Unit*>(cache.raw()), static_cast<const Unit*>(rows.raw()), rows.dim(1), rows.dim(2), cache.dim(2),
      start, start_at, row_units, total);
  CUDA_CHECK_LAUNCH();
}

void write(Tensor& cache, const Tensor& rows, int64_t start, const int32_t* start_at) {
  const size_t row_bytes = size_t(rows.dim(3)) * dtype_size(rows.dtype());
  const bool wide = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(cache.raw()) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(rows.raw()) % 16 == 0;
  if (wide) return launch<uint4>(cache, rows, start, start_at, row_bytes);
  if (row_bytes % 2 == 0) return launch<uint16_t>(cache, rows, start, start_at, row_bytes);
  launch<uint8_t>(cache, rows, start, start_at, row_bytes);
}

__global__ void positions_after_kernel(const int32_t* past, int32_t* out, int64_t T) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < T; t += int64_t(gridDim.x) * blockDim.x)
    out[t] = *past + int32_t(t);
}

__global__ void advance_positions_kernel(int32_t* past, int32_t T) { *past += T; }

}  // namespace

void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start) { write(cache, rows, start, nullptr); }

void kv_cache_write(Tensor& cache, const Tensor& rows, const Tensor& past) {
  write(cache, rows, 0, past.data<int32_t>());
}

Tensor positions_after(const Tensor& past, int64_t T) {
  Tensor out = Tensor::empty({T}, DType::i32, past.device());
  if (T == 0) return out;
  positions_after_kernel<<<grid_for(T, 128), 128, 0, stream_for(past.device())>>>(past.data<int32_t>(),
                                                                                  out.data<int32_t>(), T);
  CUDA_CHECK_LAUNCH();
  return out;
}

void advance_positions(Tensor& past, int64_t T) {
  advance_positions_kernel<<<1, 1, 0, stream_for(past.device())>>>(past.data<int32_t>(), int32_t(T));
  CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::cuda
