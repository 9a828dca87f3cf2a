#include "kernels/attention/kv_cache.h"

#include <string>

#include "kernels/dispatch.h"

namespace fathom {

namespace {

void check_cache_and_rows(const Tensor& cache, const Tensor& rows) {
  FATHOM_CHECK(cache.defined() && rows.defined() && cache.rank() == 4 && rows.rank() == 4,
               "kv_cache_write: cache must be [B, Hk, capacity, d] and rows [B, Tq, Hk, d], got ", describe(cache),
               " and ", describe(rows));
  FATHOM_CHECK(cache.dim(0) == rows.dim(0) && cache.dim(1) == rows.dim(2) && cache.dim(3) == rows.dim(3) &&
                   cache.dtype() == rows.dtype(),
               "kv_cache_write: rows ", describe(rows), " do not fit cache ", describe(cache),
               " (batch, KV heads, head dim and dtype must agree)");
}

}  // namespace

void check_position_counts(const char* op, const Tensor& past, int64_t batch) {
  const std::string want =
      batch < 0 ? std::string("I32 [1] or I32 [batch]") : "I32 [1] or I32 [B] = [" + std::to_string(batch) + "]";
  FATHOM_CHECK(past.defined() && past.dtype() == DType::i32 && past.rank() == 1 && past.dim(0) >= 1, op,
               ": the position counts must be ", want, ", got ",
               past.defined() ? describe(past) : "an undefined tensor");
  FATHOM_CHECK(batch < 0 || past.dim(0) == 1 || past.dim(0) == batch, op, ": ", past.dim(0),
               " position counts for a batch of ", batch, " (want ", want, ", got ", describe(past), ")");
}

void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start) {
  check_cache_and_rows(cache, rows);
  FATHOM_CHECK(start >= 0 && start + rows.dim(1) <= cache.dim(2), "kv_cache_write: ", rows.dim(1),
               " new positions from ", start, " overrun the cache's capacity of ", cache.dim(2));
  if (rows.numel() == 0) return;
  return on_device<KvCacheWriteKernel>("kv_cache_write", common_device("kv_cache_write", {&cache, &rows}),
                                       FATHOM_KERNEL(kv_cache_write), cache, rows, start);
}

void kv_cache_write(Tensor& cache, const Tensor& rows, const Tensor& past) {
  check_cache_and_rows(cache, rows);
  check_position_counts("kv_cache_write", past, rows.dim(0));
  FATHOM_CHECK(rows.dim(1) <= cache.dim(2), "kv_cache_write: ", rows.dim(1),
               " new positions overrun the cache's capacity of ", cache.dim(2));
  if (rows.numel() == 0) return;
  return on_device<KvCacheWritePastKernel>("kv_cache_write", common_device("kv_cache_write", {&cache, &rows, &past}),
                                           FATHOM_KERNEL(kv_cache_write), cache, rows, past);
}

Tensor positions_after(const Tensor& past, int64_t T) {
  check_position_counts("positions_after", past);
  FATHOM_CHECK(T >= 0, "positions_after: T must be >= 0, got ", T);
  return on_device("positions_after", past.device(), FATHOM_KERNEL(positions_after), past, T);
}

void advance_positions(Tensor& past, int64_t T) {
  check_position_counts("advance_positions", past);
  FATHOM_CHECK(T >= 0, "advance_positions: T must be >= 0, got ", T);
  return on_device("advance_positions", past.device(), FATHOM_KERNEL(advance_positions), past, T);
}

}  // namespace fathom
