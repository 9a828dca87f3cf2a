#include <cstring>

#include "core/error.h"
#include "kernels/attention/kv_cache.h"

namespace fathom::cpu {

namespace {

// Rows [b0, b1) of `rows` into the cache from position `start`.
void write_rows(Tensor& cache, const Tensor& rows, int64_t b0, int64_t b1, int64_t start) {
  const int64_t Tq = rows.dim(1), Hk = rows.dim(2), capacity = cache.dim(2);
  const size_t row_bytes = size_t(rows.dim(3)) * dtype_size(rows.dtype());
  auto* dst = static_cast<char*>(cache.raw());
  const auto* src = static_cast<const char*>(rows.raw());
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t t = 0; t < Tq; ++t)
      for (int64_t h = 0; h < Hk; ++h)
        std::memcpy(dst + size_t((b * Hk + h) * capacity + start + t) * row_bytes,
                    src + size_t((b * Tq + t) * Hk + h) * row_bytes, row_bytes);
}

}  // namespace

void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start) {
  write_rows(cache, rows, 0, rows.dim(0), start);
}

// The position counts are host memory on the CPU: read directly, one per row (or one for all).
void kv_cache_write(Tensor& cache, const Tensor& rows, const Tensor& past) {
  const int32_t* counts = past.data<int32_t>();
  const bool per_row = past.numel() > 1;
  // Every row checked before any is written, so a bad count leaves the cache as it was.
  for (int64_t b = 0; b < rows.dim(0); ++b) {
    const int64_t start = counts[per_row ? b : 0];
    FATHOM_CHECK(start >= 0 && start + rows.dim(1) <= cache.dim(2), "kv_cache_write: row ", b, ": ", rows.dim(1),
                 " new positions from ", start, " overrun the cache's capacity of ", cache.dim(2));
  }
  for (int64_t b = 0; b < rows.dim(0); ++b) write_rows(cache, rows, b, b + 1, counts[per_row ? b : 0]);
}

Tensor positions_after(const Tensor& past, int64_t T) {
  const int64_t n = past.numel();
  Tensor out = n == 1 ? Tensor::empty({T}, DType::i32) : Tensor::empty({n, T}, DType::i32);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t t = 0; t < T; ++t) out.data<int32_t>()[b * T + t] = past.data<int32_t>()[b] + int32_t(t);
  return out;
}

void advance_positions(Tensor& past, int64_t T) {
  for (int64_t b = 0; b < past.numel(); ++b) past.data<int32_t>()[b] += int32_t(T);
}

}  // namespace fathom::cpu
