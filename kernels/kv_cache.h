// Appending to a decoding KV cache: the cache is head-major, [B, Hk, capacity, d], so that decode
// attention reads each head's keys as one contiguous run; new keys arrive as the projections lay them
// out, [B, Tq, Hk, d]. cache[b, h, start + t, :] = rows[b, t, h, :] for t < Tq; nothing else changes.
#pragma once
#include "core/tensor.h"

namespace fathom {

// Throws (naming both shapes) unless cache and rows share B, Hk, d, dtype and device, and
// 0 <= start and start + Tq <= capacity.
void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start);

namespace cpu {
void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start);
}  // namespace cpu
namespace cuda {
void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start);
}  // namespace cuda

}  // namespace fathom
