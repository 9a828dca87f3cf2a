#include "kernels/kv_cache.h"

#include "kernels/dispatch.h"

namespace fathom {

void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start) {
  FATHOM_CHECK(cache.defined() && rows.defined() && cache.rank() == 4 && rows.rank() == 4,
               "kv_cache_write: cache must be [B, Hk, capacity, d] and rows [B, Tq, Hk, d], got ", describe(cache),
               " and ", describe(rows));
  FATHOM_CHECK(cache.dim(0) == rows.dim(0) && cache.dim(1) == rows.dim(2) && cache.dim(3) == rows.dim(3) &&
                   cache.dtype() == rows.dtype(),
               "kv_cache_write: rows ", describe(rows), " do not fit cache ", describe(cache),
               " (batch, KV heads, head dim and dtype must agree)");
  FATHOM_CHECK(start >= 0 && start + rows.dim(1) <= cache.dim(2), "kv_cache_write: ", rows.dim(1),
               " new positions from ", start, " overrun the cache's capacity of ", cache.dim(2));
  if (rows.numel() == 0) return;
  if (common_device("kv_cache_write", {&cache, &rows}).is_cpu()) return cpu::kv_cache_write(cache, rows, start);
#ifdef FATHOM_WITH_CUDA
  return cuda::kv_cache_write(cache, rows, start);
#else
  no_cuda_kernel("kv_cache_write");
#endif
}

}  // namespace fathom
