// Hopper tensor-memory-accelerator (TMA) copies and the shared-memory barriers that count their bytes
// (sm_90a). One thread copies a whole [rows x 64] panel of a [B, T, H, d] bf16 tensor into shared
// memory in the 128-byte swizzle of fathom's PanelTile (wgmma.cuh), zero-filling rows past T and
// columns past d; the threads that read it wait on the stage's barrier. This takes the address work
// of a tile copy off every thread of the CTA (cp.async: one 16-byte copy per chunk per thread).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/tma_map.h"

namespace fathom::cuda::flash {

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes barrier initialisations visible to the other threads and to the copy engine; a block-wide
// barrier must follow before any thread waits on them.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives on the barrier and tells it `bytes` more are coming from copies.
__device__ __forceinline__ void mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the barrier's phase with parity `phase` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}

// Copies rows [row0, row0 + ROWS) of head h of batch b of the tensor behind `map` (built by
// head_rows_map for ROWS-row boxes) into the PanelTile at `tile`, one 64-column panel per copy; the
// copies complete on `bar`, which must expect Tile::kBytes for them.
template <class Tile>
__device__ __forceinline__ void tma_load_rows(uint32_t tile, const CUtensorMap* map, uint32_t bar, int h, int row0,
                                              int b) {
#pragma unroll
  for (int p = 0; p < Tile::kBytes / Tile::kPanelBytes; ++p)
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(tile + uint32_t(p * Tile::kPanelBytes)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(p * 64), "r"(h), "r"(row0), "r"(b), "r"(bar)
        : "memory");
}

}  // namespace fathom::cuda::flash
