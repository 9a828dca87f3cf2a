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

// Decoding's position counts kept on the device, so that a decoding step captured once as a CUDA graph
// (kernels/runtime/backend.h) finds each replay's positions in memory instead of in its launch arguments.
// `past` is on the tensors' device (host memory on the CPU): the positions the caches held before this
// step, I32 [1] (one count for every sequence) or I32 [B] (sequence b's own count, past[b]: a batch of
// prompts of different lengths). Below, past_b is past[b], or past[0] for a [1] count.
//   kv_cache_write:    as above with row b's start = past_b. A kernel cannot throw, so the caller checks
//                      past_b + Tq <= capacity against its own host counts; the CUDA kernel writes no
//                      row whose start is out of range, the CPU throws naming the row.
//   positions_after:   past_b + t (RoPE's positions for the step): I32 [T] for a [1] count, [B, T] for
//                      a [B] count.
//   advance_positions: every past_b += T.
// Each throws unless past is I32 [1] or I32 [B] (B = the rows' batch) on the device of the other tensors.
void kv_cache_write(Tensor& cache, const Tensor& rows, const Tensor& past);
// Throws, naming op, unless past is I32 [1] or I32 [batch] (batch -1: any count of sequences). Every op that
// reads the counts checks them with it.
void check_position_counts(const char* op, const Tensor& past, int64_t batch = -1);
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
