// One launch for a whole append: a thread per 16-byte (or 4-byte) unit of the new rows; and decoding's
// position counts on the device.
#include "kernels/attention/kv_cache.h"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

// start_at: where each row's first new position is, read on the device (null: `start` for every row);
// start_rows: its entries, 1 (every row's) or B (row b's at b).
template <typename Unit>
__global__ void kv_cache_write_kernel(Unit* cache, const Unit* rows, int64_t Tq, int64_t Hk, int64_t capacity,
                                      int64_t start, const int32_t* start_at, int64_t start_rows, int64_t row_units,
                                      int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t unit = i % row_units, row = i / row_units;  // row = (b * Tq + t) * Hk + h
    const int64_t h = row % Hk, t = (row / Hk) % Tq, b = row / (Hk * Tq);
    const int64_t first = start_at ? int64_t(start_at[start_rows > 1 ? b : 0]) : start;
    if (first < 0 || first + Tq > capacity) continue;  // never out of bounds (the host checks its own counts)
    cache[((b * Hk + h) * capacity + first + t) * row_units + unit] = rows[i];
  }
}

template <typename Unit>
void launch(Tensor& cache, const Tensor& rows, int64_t start, const int32_t* start_at, int64_t start_rows,
            size_t row_bytes) {
  const int64_t row_units = int64_t(row_bytes / sizeof(Unit)), total = rows.numel() / rows.dim(3) * row_units;
  kv_cache_write_kernel<Unit><<<grid_for(total, 256), 256, 0, stream_for(cache.device())>>>(
      static_cast<Unit*>(cache.raw()), static_cast<const Unit*>(rows.raw()), rows.dim(1), rows.dim(2), cache.dim(2),
      start, start_at, start_rows, row_units, total);
  CUDA_CHECK_LAUNCH();
}

void write(Tensor& cache, const Tensor& rows, int64_t start, const int32_t* start_at, int64_t start_rows) {
  const size_t row_bytes = size_t(rows.dim(3)) * dtype_size(rows.dtype());
  const bool wide = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(cache.raw()) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(rows.raw()) % 16 == 0;
  if (wide) return launch<uint4>(cache, rows, start, start_at, start_rows, row_bytes);
  if (row_bytes % 2 == 0) return launch<uint16_t>(cache, rows, start, start_at, start_rows, row_bytes);
  launch<uint8_t>(cache, rows, start, start_at, start_rows, row_bytes);
}

// out [n, T] (n = past's entries): past[b] + t.
__global__ void positions_after_kernel(const int32_t* past, int32_t* out, int64_t T, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = past[i / T] + int32_t(i % T);
}

__global__ void advance_positions_kernel(int32_t* past, int64_t n, int32_t T) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < n; b += int64_t(gridDim.x) * blockDim.x)
    past[b] += T;
}

}  // namespace

void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start) { write(cache, rows, start, nullptr, 1); }

void kv_cache_write(Tensor& cache, const Tensor& rows, const Tensor& past) {
  write(cache, rows, 0, past.data<int32_t>(), past.numel());
}

Tensor positions_after(const Tensor& past, int64_t T) {
  const int64_t n = past.numel();
  Tensor out =
      n == 1 ? Tensor::empty({T}, DType::i32, past.device()) : Tensor::empty({n, T}, DType::i32, past.device());
  if (T == 0) return out;
  positions_after_kernel<<<grid_for(n * T, 128), 128, 0, stream_for(past.device())>>>(past.data<int32_t>(),
                                                                                      out.data<int32_t>(), T, n * T);
  CUDA_CHECK_LAUNCH();
  return out;
}

void advance_positions(Tensor& past, int64_t T) {
  const int64_t n = past.numel();
  advance_positions_kernel<<<grid_for(n, 128), 128, 0, stream_for(past.device())>>>(past.data<int32_t>(), n,
                                                                                    int32_t(T));
  CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::cuda
