// Appending to a decoding KV cache: the cache is head-major, [B, Hk, capacity, d], so that decode
// attention reads each head's keys as one contiguous run; new keys arrive as the projections lay them
// out, [B, Tq, Hk, d]. cache[b, h, start + t, :] = rows[b, t, h, :] for t < Tq; nothing else changes.
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// Throws (naming both shapes) unless cache and rows share B, Hk, d, dtype and device, and
// 0 <= start and start + Tq <= capacity.
void kv_cache_write(Tensor& cache, const Tensor& rows, int64_t start);

// Decoding's position count kept on the device, so that a decoding step captured once as a CUDA graph
// (kernels/runtime/backend.h) finds each replay's positions in memory instead of in its launch arguments.
// `past` is I32 [1] on the tensors' device: the positions the caches held before this step.
//   kv_cache_write:    as above with start = past[0]. A kernel cannot throw, so the caller checks
//                      past[0] + Tq <= capacity against its own host count.
//   positions_after:   I32 [T], past[0] + t (RoPE's positions for the step).
//   advance_positions: past[0] += T.
// Each throws unless past is I32 [1] on the device of the other tensors.
void kv_cache_write(Tensor& cache, const Tensor& rows, const Tensor& past);
Tensor positions_after(const Tensor& past, int64_t T);
void advance_positions(Tensor& past, int64_t T);

// The backends' entry points, one per function above (on the CPU, past is read on the host).
using KvCacheWriteKernel = void(Tensor& cache, const Tensor& rows, int64_t start);
using KvCacheWritePastKernel = void(Tensor& cache, const Tensor& rows, const Tensor& past);
using PositionsAfterKernel = Tensor(const Tensor& past, int64_t T);
using AdvancePositionsKernel = void(Tensor& past, int64_t T);
FATHOM_BACKENDS(KvCacheWriteKernel, kv_cache_write)
FATHOM_BACKENDS(KvCacheWritePastKernel, kv_cache_write)
FATHOM_BACKENDS(PositionsAfterKernel, positions_after)
FATHOM_BACKENDS(AdvancePositionsKernel, advance_positions)

}  // namespace fathom
