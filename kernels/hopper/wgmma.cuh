// Hopper warpgroup MMA (wgmma, sm_90a): shared-memory matrix descriptors for fathom's 128-byte swizzled
// tiles and the m64nNk16 bf16 -> fp32 instructions the attention kernels issue.
//
// A warpgroup is 4 consecutive warps (128 threads) starting at a warp index divisible by 4. One
// wgmma multiplies a 64 x 16 A (shared memory, or registers) by a 16 x N B (shared memory) into a
// 64 x N fp32 accumulator spread over the warpgroup: warp w of the group holds rows 16w .. 16w + 15 in
// the mma.sync m16n8 C layout repeated N / 8 times, so d[4j + e] is
//   row 16w + g + 8 * (e / 2), column 8j + 2t + (e % 2)       (g = lane / 4, t = lane % 4),
// and an A fragment in registers is the mma.sync m16n8k16 A fragment of the warp's 16 rows.
//
// Shared-memory layout (PanelTile): a [ROWS x D] bf16 tile is D / 64 column panels of [ROWS x 64];
// a panel row is 128 bytes whose 16-byte chunk c sits at chunk c ^ (row % 8). This is the hardware's
// 128-byte swizzle, so one layout serves both operand orders:
//   K-major (rows are M or N, columns K: Q and K for S = Q K^T): 8-row groups 1024 bytes apart, a
//     k-step of 16 columns is +32 bytes inside the panel (the swizzle is applied to the address);
//   MN-major (rows are K, columns N: V for O = P V): 8-row K groups 1024 bytes apart, 64-column
//     N groups one panel apart.
// Panels must start 1024-byte aligned.
#pragma once
#include <cstdint>

#include "kernels/attention/attention_mma.cuh"

namespace fathom::cuda::flash {

// Whether this compilation pass can issue wgmma (the sm_90a target); kernels that use it compile to a
// trap elsewhere and their launchers are only chosen when the build targets sm_90a (FATHOM_WGMMA).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FATHOM_WGMMA_DEVICE 1
#else
#define FATHOM_WGMMA_DEVICE 0
#endif

// The dynamic shared memory of a wgmma kernel, aligned for 128-byte-swizzled panels.
__device__ __forceinline__ char* wgmma_shared() {
  extern __shared__ __align__(1024) char wgmma_smem[];
  return wgmma_smem;
}
// The most dynamic shared memory one block may opt into on sm_90 (227 KiB). Configurations are checked
// against it when they are compiled, not when they are first launched.
constexpr int kMaxSmemPerBlock = 227 * 1024;

template <int ROWS, int D>
struct PanelTile : TileFragments<PanelTile<ROWS, D>> {
  static_assert(D % 64 == 0 && ROWS % 8 == 0, "panels are 64 columns wide, row groups 8 rows tall");
  static constexpr int kPanelBytes = ROWS * 128;
  static constexpr int kBytes = kPanelBytes * (D / 64);

  // Byte offset of 16-byte chunk `chunk` (of D / 8) of row `row`.
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return uint32_t((chunk >> 3) * kPanelBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
  }
  __device__ __forceinline__ static uint32_t element(int row, int col) {
    return offset(row, col >> 3) + uint32_t(col & 7) * 2u;
  }
};

// The sm_90 shared-memory matrix descriptor: start address, leading and stride byte offsets (all in
// 16-byte units) and the swizzle mode (1 = 128-byte).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

// K-major operand rows row0 .. row0 + 63 (A) or the whole N rows (B, row0 = 0) of a PanelTile at k-step ks.
template <int ROWS, int D>
__device__ __forceinline__ uint64_t k_major_desc(uint32_t tile, int row0, int ks) {
  return smem_desc(tile + uint32_t((ks >> 2) * PanelTile<ROWS, D>::kPanelBytes + row0 * 128 + (ks & 3) * 32), 16, 1024);
}
// MN-major operand: K rows 16 ks .. 16 ks + 15 of a PanelTile, all D columns as N (B), or the 64 columns
// of the panel at `tile` as M (A).
template <int ROWS, int D>
__device__ __forceinline__ uint64_t mn_major_desc(uint32_t tile, int ks) {
  return smem_desc(tile + uint32_t(ks * 16 * 128), PanelTile<ROWS, D>::kPanelBytes, 1024);
}

// Orders this thread's ordinary shared-memory writes (st.shared, cp.async) before later reads by the
// tensor cores (the async proxy); each writing thread runs it before the barrier that publishes a tile.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Pins registers to this point of the program (an empty asm that "reads and writes" them): no write
// to them moves below it and no read above it.
__device__ __forceinline__ void pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void pin(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
template <class T, int N>
__device__ __forceinline__ void pin(T (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) pin(r[i]);
}

// Makes register writes visible to the wgmmas that follow (required before the first wgmma of a
// batch). The registers the batch reads or accumulates into are pinned first: left free, the
// compiler may sink their last writes below the fence, and ptxas then serializes the wgmmas (C7513).
template <class... Regs>
__device__ __forceinline__ void wgmma_fence(Regs&... regs) {
  (pin(regs), ...);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups are in flight, then pins `regs`, the accumulators
// whose results the caller reads next: the compiler sees wgmma's results as written when it is
// issued, so without the pin it could read them before the wait.
template <int N, class... Regs>
__device__ __forceinline__ void wgmma_wait(Regs&... regs) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
  (pin(regs), ...);
}

// The A fragment of 16-column step ks of an m64nN accumulator, as bf16: two 8-column tiles side by side.
template <int N>
__device__ __forceinline__ void accumulator_fragment(uint32_t (&a)[4], const float (&acc)[N], int ks) {
#pragma unroll
  for (int r = 0; r < 4; ++r) a[r] = pack_bf16(acc[8 * ks + 2 * r], acc[8 * ks + 2 * r + 1]);
}

// Writes a warp's rows of an m64nN accumulator as bf16 into rows row0 + g (times factor[0]) and
// row0 + g + 8 (times factor[1]) of a PanelTile.
template <class Tile, int N>
__device__ __forceinline__ void stage_wgmma_accumulator(char* tile, const float (&acc)[N], const float (&factor)[2],
                                                        int row0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < N / 4; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      *reinterpret_cast<uint32_t*>(tile + Tile::element(row0 + g + 8 * half, 8 * j + 2 * t)) =
          pack_bf16(acc[4 * j + 2 * half] * factor[half], acc[4 * j + 2 * half + 1] * factor[half]);
}

#define FATHOM_ACC8(i)                                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define FATHOM_ACC32 FATHOM_ACC8(0), FATHOM_ACC8(8), FATHOM_ACC8(16), FATHOM_ACC8(24)
#define FATHOM_ACC64 FATHOM_ACC32, FATHOM_ACC8(32), FATHOM_ACC8(40), FATHOM_ACC8(48), FATHOM_ACC8(56)
#define FATHOM_OUT8(i)                                                                                        \
  "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), "=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), \
      "=f"(d[i + 7])
#define FATHOM_OUT32 FATHOM_OUT8(0), FATHOM_OUT8(8), FATHOM_OUT8(16), FATHOM_OUT8(24)
#define FATHOM_OUT64 FATHOM_OUT32, FATHOM_OUT8(32), FATHOM_OUT8(40), FATHOM_OUT8(48), FATHOM_OUT8(56)
#define FATHOM_REGS32                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FATHOM_REGS64                                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "     \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
  "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (+)= A B for one m64nNk16 step; `accumulate` = 0 overwrites d. TRANS_A / TRANS_B = 1 read an
// MN-major operand from shared memory. `ss`: A from shared memory; `rs`: A from registers. `ss_set`:
// d = A B, with d an output only, so that whatever last wrote d's registers (the previous block's
// softmax, say) is no input of this wgmma: ptxas serializes wgmmas whose inputs are written by other
// instructions while wgmmas are in flight (C7513).
template <int N>
struct Wgmma;

template <>
struct Wgmma<64> {
  template <int TRANS_A, int TRANS_B>
  __device__ __forceinline__ static void ss_set(float (&d)[32], uint64_t a, uint64_t b) {
#if FATHOM_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FATHOM_REGS32 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : FATHOM_OUT32
        : "l"(a), "l"(b), "n"(0), "n"(TRANS_A), "n"(TRANS_B));
#endif
  }
  template <int TRANS_A, int TRANS_B>
  __device__ __forceinline__ static void ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
#if FATHOM_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FATHOM_REGS32 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : FATHOM_ACC32
        : "l"(a), "l"(b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));
#endif
  }
  template <int TRANS_B>
  __device__ __forceinline__ static void rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#if FATHOM_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FATHOM_REGS32
        ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : FATHOM_ACC32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
#endif
  }
};

template <>
struct Wgmma<128> {
  template <int TRANS_A, int TRANS_B>
  __device__ __forceinline__ static void ss_set(float (&d)[64], uint64_t a, uint64_t b) {
#if FATHOM_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FATHOM_REGS64 ", %64, %65, p, 1, 1, %67, %68;\n}\n"
        : FATHOM_OUT64
        : "l"(a), "l"(b), "n"(0), "n"(TRANS_A), "n"(TRANS_B));
#endif
  }
  template <int TRANS_A, int TRANS_B>
  __device__ __forceinline__ static void ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
#if FATHOM_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FATHOM_REGS64 ", %64, %65, p, 1, 1, %67, %68;\n}\n"
        : FATHOM_ACC64
        : "l"(a), "l"(b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));
#endif
  }
  template <int TRANS_B>
  __device__ __forceinline__ static void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#if FATHOM_WGMMA_DEVICE
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FATHOM_REGS64
        ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : FATHOM_ACC64
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TRANS_B));
#endif
  }
};

#undef FATHOM_ACC8
#undef FATHOM_ACC32
#undef FATHOM_ACC64
#undef FATHOM_OUT8
#undef FATHOM_OUT32
#undef FATHOM_OUT64
#undef FATHOM_REGS32
#undef FATHOM_REGS64

// d = A B over K / 16 k-steps with both operands in shared memory: descriptors a_desc(ks), b_desc(ks),
// K-major unless TRANS_A / TRANS_B.
template <int N, int STEPS, int TRANS_A = 0, int TRANS_B = 0, class ADesc, class BDesc>
__device__ __forceinline__ void wgmma_product(float (&d)[N / 2], const ADesc& a_desc, const BDesc& b_desc) {
  Wgmma<N>::template ss_set<TRANS_A, TRANS_B>(d, a_desc(0), b_desc(0));
#pragma unroll
  for (int ks = 1; ks < STEPS; ++ks) Wgmma<N>::template ss<TRANS_A, TRANS_B>(d, a_desc(ks), b_desc(ks), 1);
}

// d += A B over STEPS k-steps, A in registers (a[ks]: the k-step's A fragment), B an MN-major
// shared-memory operand with descriptors b_desc(ks). Neither fenced nor committed: the caller orders it.
template <int N, int STEPS, class BDesc>
__device__ __forceinline__ void wgmma_product_rs(float (&d)[N / 2], const uint32_t (&a)[STEPS][4],
                                                 const BDesc& b_desc) {
#pragma unroll
  for (int ks = 0; ks < STEPS; ++ks) Wgmma<N>::template rs<1>(d, a[ks], b_desc(ks), 1);
}

// d += bf16(src) B, issued and committed: the accumulator src (64 x 16 STEPS) becomes the A operand
// in registers, B is MN-major with descriptors b_desc(ks).
template <int N, int STEPS, int M, class BDesc>
__device__ __forceinline__ void issue_product_of_accumulator(float (&d)[N / 2], const float (&src)[M],
                                                             const BDesc& b_desc) {
  static_assert(M == STEPS * 8, "an accumulator of 16 STEPS columns");
  uint32_t a[STEPS][4];
#pragma unroll
  for (int ks = 0; ks < STEPS; ++ks) accumulator_fragment(a[ks], src, ks);
  wgmma_fence(a, d);
  wgmma_product_rs<N>(d, a, b_desc);
  wgmma_commit();
}

}  // namespace fathom::cuda::flash
