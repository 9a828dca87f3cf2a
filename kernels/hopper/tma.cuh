// Hopper tensor-memory-accelerator (TMA) copies and the shared-memory barriers that count their bytes
// (sm_90a). One thread copies a whole [rows x 64] panel of a [B, T, H, d] bf16 tensor into shared
// memory in the 128-byte swizzle of fathom's PanelTile (wgmma.cuh), zero-filling rows past T and
// columns past d; the threads that read it wait on the stage's barrier. This takes the address work
// of a tile copy off every thread of the CTA (cp.async: one 16-byte copy per chunk per thread).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "kernels/hopper/tma_map.h"

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
// One arrival (a consumer telling the producer it is done with a stage).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
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

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory to shared
// memory; the copy completes on `bar`, which must expect its bytes.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// An L2 policy for a stream read once: its lines are the first to go, so the stream does not push out of L2 what
// is read again (code, activations, a KV cache).
// Not volatile: the same policy each time, so the compiler may make it once.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// bulk_load under an L2 policy (l2_evict_first_policy).
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

// Writes `bytes` (a multiple of 16, both addresses 16-byte aligned) from shared memory to global memory,
// stored over (bulk_store) or added into fp32 values there at L2 (bulk_reduce_add); both join the
// thread's current bulk group (bulk_commit, then bulk_wait or bulk_wait_read).
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_reduce_add(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of the thread's bulk groups are unfinished (their writes performed)...
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// ... or only until they have read their shared-memory sources, which may then be overwritten.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy global accesses (a flag's load or store) with its bulk copies.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// A ring of STAGES shared-memory stages that one producer thread fills with copies and all WARPS warps
// of the CTA read. Each stage has a "full" barrier (counting the copies' bytes) and an "empty" one (one
// arrival per warp once it has read the stage). Warps wait for each other only through the stages, so
// one warpgroup's softmax can run while another's products do, instead of every step ending on a
// block-wide barrier. Item n of a walk lives in stage n % STAGES.
template <int STAGES, int WARPS>
struct StageRing {
  static constexpr int kBarrierBytes = 2 * 8 * STAGES;  // full barriers, then empty ones
  uint32_t bars;

  __device__ __forceinline__ uint32_t full(int n) const { return bars + uint32_t(8 * (n % STAGES)); }
  __device__ __forceinline__ uint32_t empty(int n) const { return bars + uint32_t(8 * (STAGES + n % STAGES)); }
  // By one thread; a block-wide barrier must follow before anyone waits.
  __device__ __forceinline__ void init() const {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), WARPS);
    }
    fence_mbarrier_init();
  }
  // Producer, before copying item n: waits until every warp has released item n - STAGES (the stage's
  // last occupant), then arms the stage's full barrier for `bytes`.
  __device__ __forceinline__ void acquire(int n, uint32_t bytes) const {
    if (n >= STAGES) mbarrier_wait(empty(n), uint32_t(n / STAGES - 1) & 1u);
    mbarrier_expect_bytes(full(n), bytes);
  }
  // Consumers: item n's copies have landed.
  __device__ __forceinline__ void wait_full(int n) const { mbarrier_wait(full(n), uint32_t(n / STAGES) & 1u); }
  // Consumers: this warp is done with item n's stage (its products reading it have completed).
  __device__ __forceinline__ void release(int n, int lane) const {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty(n));
  }
};

}  // namespace fathom::cuda::flash
