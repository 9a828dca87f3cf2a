#include <cstring>

#include "kernels/attention/kv_cache.h"

namespace fathom::cpu {

void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start) {
  const int64_t B = rows.dim(0), Tq = rows.dim(1), Hk = rows.dim(2), capacity = cache.dim(2);
  const size_t row_bytes = size_t(rows.dim(3)) * dtype_size(rows.dtype());
  auto* dst = static_cast<char*>(cache.raw());
  const auto* src = static_cast<const char*>(rows.raw());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tq; ++t)
      for (int64_t h = 0; h < Hk; ++h)
        std::memcpy(dst + size_t((b * Hk + h) * capacity + start + t) * row_bytes,
                    src + size_t((b * Tq + t) * Hk + h) * row_bytes, row_bytes);
}

// The position count is host memory on the CPU: read directly.
void kv_cache_write(Tensor& cache, const Tensor& rows, const Tensor& past) {
  cpu::kv_cache_write(cache, rows, int64_t(past.data<int32_t>()[0]));
}

Tensor positions_after(const Tensor& past, int64_t T) {
  Tensor out = Tensor::empty({T}, DType::i32);
  for (int64_t t = 0; t < T; ++t) out.data<int32_t>()[t] = past.data<int32_t>()[0] + int32_t(t);
  return out;
}

void advance_positions(Tensor& past, int64_t T) { past.data<int32_t>()[0] += int32_t(T); }

}  // namespace fathom::cpu
