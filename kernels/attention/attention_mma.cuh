// Building blocks of the flash-attention kernels: asynchronous tile copies into swizzled shared memory,
// ldmatrix fragment loads and the m16n8k16 bf16 tensor-core MMA (fp32 accumulate).
//
// Fragment layouts of mma.m16n8k16.row.col (lane = 4 * g + t, g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16 x 8, k x n):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C (16 x 8, fp32):       c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1)
// Two C tiles side by side (columns 16k..16k+15) hold exactly the A fragment of k-step k, which is how
// probabilities computed in registers feed the next product without a trip through shared memory.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace fathom::cuda::flash {

using bf16_t = __nv_bfloat16;

// fathom's bf16 (core/dtype.h) and CUDA's __nv_bfloat16 share one bit layout; launchers hand the
// kernels their pointers through this cast.
template <class T>
const bf16_t* dev(const T* p) {
  return reinterpret_cast<const bf16_t*>(p);
}
template <class T>
bf16_t* dev(T* p) {
  return reinterpret_cast<bf16_t*>(p);
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses L1; a false `valid` writes zeros (masked tails).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b for one 16x8x16 tile.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16x2 register, `lo` in the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x on the special-function unit; 2^-inf = +0, which is how masked scores vanish.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Whether a block needs its mask, fixed at compile time.
template <bool V>
struct MaskedBlock {
  __device__ constexpr operator bool() const { return V; }
};

// Runs body(MaskedBlock<true>{}) if `masked`, else body(MaskedBlock<false>{}), so that a mask test
// written `if (masked && ...)` on the argument is compiled out of the unmasked copy. Left to itself,
// the compiler often keeps one copy of a block's loop with a compare and a select per score.
template <class Body>
__device__ __forceinline__ void split_by_mask(bool masked, Body&& body) {
  if (masked)
    body(MaskedBlock<true>{});
  else
    body(MaskedBlock<false>{});
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ldmatrix fragment loads from a swizzled tile whose byte offset of 16-byte chunk c of row r is
// Layout::offset(r, c) (SwizzledTile here; PanelTile, wgmma.cuh, for the warpgroup kernels).
template <class Layout>
struct TileFragments {
  // A fragment (16 x 16) whose top-left element is (row0, k0): rows are M, columns are K.
  __device__ __forceinline__ static void load_a(uint32_t (&a)[4], uint32_t base, int row0, int k0, int lane) {
    ldmatrix_x4(a, base + Layout::offset(row0 + (lane & 15), (k0 >> 3) + (lane >> 4)));
  }
  // B fragments of two n-tiles (n0 and n0 + 8) at k-step k0, from a tile whose rows are N and columns K
  // (e.g. K rows for Q K^T): b[0], b[1] for n0; b[2], b[3] for n0 + 8.
  __device__ __forceinline__ static void load_b(uint32_t (&b)[4], uint32_t base, int n0, int k0, int lane) {
    ldmatrix_x4(b, base + Layout::offset(n0 + (lane & 7) + ((lane >> 4) << 3), (k0 >> 3) + ((lane >> 3) & 1)));
  }
  // An A fragment (16 x 16) of the TRANSPOSE of this tile: A[m][k] = tile[k0 + k][m0 + m] (e.g. P^T from a
  // tile of P whose rows are queries, for dV = P^T dO).
  __device__ __forceinline__ static void load_a_trans(uint32_t (&a)[4], uint32_t base, int m0, int k0, int lane) {
    ldmatrix_x4_trans(a, base + Layout::offset(k0 + (lane & 7) + ((lane >> 4) << 3), (m0 >> 3) + ((lane >> 3) & 1)));
  }
  // Same, from a tile whose rows are K and columns N (e.g. V rows for P V): transposed on load.
  __device__ __forceinline__ static void load_b_trans(uint32_t (&b)[4], uint32_t base, int k0, int n0, int lane) {
    ldmatrix_x4_trans(b, base + Layout::offset(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4)));
  }
};

// A [rows x D] bf16 tile in shared memory, stored as 16-byte chunks with an XOR swizzle so that the
// eight row addresses of one ldmatrix (same chunk column, eight consecutive rows) and the eight rows
// of a warp's fragment stores fall in distinct banks.
template <int D>
struct SwizzledTile : TileFragments<SwizzledTile<D>> {
  static_assert(D == 32 || D == 64 || D == 128, "tile widths are 32, 64 or 128 bf16");
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = D * 2;

  // Byte offset of chunk `chunk` of row `row`.
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    if constexpr (kChunks >= 8) {
      return uint32_t(row * kChunks + (chunk ^ (row & 7))) * 16u;
    } else {  // 64-byte rows: two rows share a 128-byte bank line
      return uint32_t(row * kChunks + (chunk ^ ((row >> 1) & 3))) * 16u;
    }
  }
  // Byte offset of element (row, col).
  __device__ __forceinline__ static uint32_t element(int row, int col) {
    return offset(row, col >> 3) + uint32_t(col & 7) * 2u;
  }
};

// Issues the cp.async copies of rows [row0, row0 + ROWS) of a [T, ...] bf16 matrix with row stride
// `stride` elements into a swizzled tile (a SwizzledTile<D> unless Tile names another layout of D / 8
// chunks per row). Rows at or past T and columns at or past d are zero-filled.
template <int D, int ROWS, int THREADS, class Tile = SwizzledTile<D>>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const bf16_t* src, int64_t stride, int row0, int T,
                                                int d, int tid) {
  constexpr int kChunks = D / 8, kTotal = ROWS * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + tid;
    if (kTotal % THREADS != 0 && i >= kTotal) break;
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = (row0 + r < T) && (c * 8 < d);
    const bf16_t* g = valid ? src + int64_t(row0 + r) * stride + c * 8 : src;
    cp_async_16(tile + Tile::offset(r, c), g, valid);
  }
}

// Same as load_tile_async for rows that lie anywhere: row_ptr(r) is the address of tile row r, or null
// for a row to zero-fill (gathered layouts such as MoDA's folded query heads and depth slots);
// `anywhere` is any valid global address, named by the zero-byte copies of such rows.
template <int D, int ROWS, int THREADS, class Tile = SwizzledTile<D>, class RowPtr>
__device__ __forceinline__ void load_rows_async(uint32_t tile, const RowPtr& row_ptr, const bf16_t* anywhere, int d,
                                                int tid) {
  constexpr int kChunks = D / 8, kTotal = ROWS * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + tid;
    if (kTotal % THREADS != 0 && i >= kTotal) break;
    const int r = i / kChunks, c = i % kChunks;
    const bf16_t* row = row_ptr(r);
    const bool valid = row != nullptr && c * 8 < d;
    cp_async_16(tile + Tile::offset(r, c), valid ? row + c * 8 : anywhere, valid);
  }
}

// Copies a swizzled [ROWS x D] tile (layout as in load_tile_async) to rows [row0, row0 + ROWS) of a bf16
// matrix, 16 bytes per store, skipping rows at or past T and columns at or past d.
template <int D, int ROWS, int THREADS, class Tile = SwizzledTile<D>>
__device__ __forceinline__ void store_tile(bf16_t* dst, int64_t stride, int row0, int T, int d, const char* tile,
                                           int tid) {
  constexpr int kChunks = D / 8, kTotal = ROWS * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + tid;
    if (kTotal % THREADS != 0 && i >= kTotal) break;
    const int r = i / kChunks, c = i % kChunks;
    if (row0 + r < T && c * 8 < d)
      *reinterpret_cast<uint4*>(dst + int64_t(row0 + r) * stride + c * 8) =
          *reinterpret_cast<const uint4*>(tile + Tile::offset(r, c));
  }
}

// Writes a warp's fp32 accumulator of MT m-tiles x (D / 8) n-tiles, times `factor` per row half, as
// bf16 into a swizzled tile at rows row0 + 16 * mt (+ g, + g + 8).
template <int D, int MT>
__device__ __forceinline__ void stage_accumulator(char* tile, const float (&acc)[MT][D / 8][4],
                                                  const float (&factor)[MT][2], int row0, int lane) {
  using Tile = SwizzledTile<D>;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int r = row0 + mt * 16 + g, c = nt * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(tile + Tile::element(r, c)) =
          pack_bf16(acc[mt][nt][0] * factor[mt][0], acc[mt][nt][1] * factor[mt][0]);
      *reinterpret_cast<uint32_t*>(tile + Tile::element(r + 8, c)) =
          pack_bf16(acc[mt][nt][2] * factor[mt][1], acc[mt][nt][3] * factor[mt][1]);
    }
}

// store_tile for rows that lie anywhere: row_ptr(r) is the destination of tile row r, or null to skip it.
template <int D, int ROWS, int THREADS, class Tile = SwizzledTile<D>, class RowPtr>
__device__ __forceinline__ void store_rows(const RowPtr& row_ptr, int d, const char* tile, int tid) {
  constexpr int kChunks = D / 8, kTotal = ROWS * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + tid;
    if (kTotal % THREADS != 0 && i >= kTotal) break;
    const int r = i / kChunks, c = i % kChunks;
    bf16_t* row = row_ptr(r);
    if (row != nullptr && c * 8 < d)
      *reinterpret_cast<uint4*>(row + c * 8) = *reinterpret_cast<const uint4*>(tile + Tile::offset(r, c));
  }
}

}  // namespace fathom::cuda::flash
