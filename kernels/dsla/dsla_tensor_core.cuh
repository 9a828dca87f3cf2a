// Device pieces of the tensor-core DSLA kernels (dsla_tensor_core.cu): the 64-token chunk, shared-memory
// strides, row loads, per-chunk cumulative log2 gates, and a block-wide bf16 matrix product on the tensor
// cores (wmma 16x16x16, fp32 accumulation).
//
// Numerical safety of the gate ratios. Within a chunk the cumulative gates b_t (log2 units, restarting at
// 0) only fall, so e^{b_t - b_j} <= 1 for j <= t, but e^{-b_j} alone can overflow for strong gates. The
// chunk is split into four 16-row sub-blocks. For rows t in sub-block I and columns j in an earlier
// sub-block, the ratio is factorised through the boundary row r = 16 I: e^{b_t - b_r} e^{b_r - b_j}, with
// t >= r > j, so both factors are <= 1 and go into bf16 operands of one matrix product (a factor that
// underflows does so only where the true ratio is even smaller). On the four diagonal sub-blocks, where
// no such row exists, the ratios are formed exactly from the difference b_t - b_j in fp32 on the CUDA
// cores (16 x 16 x d per sub-block, a quarter of the chunk's pairs). The column-side products (dk) use
// the boundary after the column's sub-block, r = 16 (J + 1), the same argument mirrored.
#pragma once
#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

namespace fathom::cuda::dsla_tc {

using bf16 = __nv_bfloat16;
namespace wm = nvcuda::wmma;

constexpr int kChunk = 64, kSub = 16, kThreads = 512, kWarps = kThreads / 32;
constexpr float kLog2e = 1.4426950408889634f;

// Row strides (elements) padded so that rows start on different banks; every 16-row step stays 32-byte
// aligned, as wmma's loads and stores need.
template <int D>
__host__ __device__ constexpr int ldb() {
  return D + 8;
}  // bf16 [rows][D]
template <int D>
__host__ __device__ constexpr int ldf() {
  return D + 4;
}  // fp32 [rows][D]
constexpr int kLdScoreF = kChunk + 4, kLdScoreB = kChunk + 8;  // fp32 / bf16 [64][64]

// Rows of Kt (k_j e^{b_r - b_j}, r = 16 I) used by row sub-block I = 1..3: 16 I rows starting at 8 I (I - 1).
__device__ __forceinline__ int key_rows_offset(int I) { return 8 * I * (I - 1); }
// Rows of Qr (q_t e^{b_t - b_r}, r = 16 (J + 1)) used by column sub-block J = 0..2: 48 - 16 J rows.
__device__ __forceinline__ int query_rows_offset(int J) { return J == 0 ? 0 : J == 1 ? 48 : 80; }
constexpr int kFactorRows = 96;  // 16 + 32 + 48

__device__ __forceinline__ int chunk_rows(int64_t t0, int64_t T_len) {
  return int(T_len - t0 < kChunk ? T_len - t0 : kChunk);
}

// Rows [t0, t0 + 64) of `head` of a [B, T, heads, D] bf16 tensor into dst[64][ldb], zeros past L.
template <int D>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, int64_t b, int64_t t0, int L, int64_t T_len,
                                          int heads, int head) {
  constexpr int V = D / 8, ITER = kChunk * V / kThreads;  // every load issued before the first store
  uint4 val[ITER];
#pragma unroll
  for (int k = 0; k < ITER; ++k) {
    const int i = threadIdx.x + k * kThreads, t = i / V, c = i % V * 8;
    val[k] = t < L ? *reinterpret_cast<const uint4*>(src + ((b * T_len + t0 + t) * heads + head) * int64_t(D) + c)
                   : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int k = 0; k < ITER; ++k) {
    const int i = threadIdx.x + k * kThreads, t = i / V, c = i % V * 8;
    *reinterpret_cast<uint4*>(dst + t * ldb<D>() + c) = val[k];
  }
}

// Inclusive prefix (or, REVERSE, suffix) sums over the 64 rows of a chunk's column c, in registers: each
// of the kThreads / D parts of the block holds R consecutive rows x[0..R) of column c (thread c + D part).
// Every thread adds the totals of the parts before (after) its own, exchanged through scratch[kThreads];
// the caller puts a barrier between this and the next use of scratch.
template <int D, bool REVERSE = false>
struct ColumnScan {
  static constexpr int kParts = kThreads / D, R = kChunk / kParts;
  static_assert(kThreads % D == 0 && kChunk % kParts == 0, "the block splits the chunk's rows evenly");
  __device__ static int column() { return threadIdx.x % D; }
  __device__ static int first_row() { return threadIdx.x / D * R; }
  __device__ static void scan(float (&x)[R], float* scratch) {
    const int c = column(), part = threadIdx.x / D;
#pragma unroll
    for (int r = 1; r < R; ++r) {
      const int i = REVERSE ? R - 1 - r : r;
      x[i] += x[REVERSE ? i + 1 : i - 1];
    }
    scratch[part * D + c] = x[REVERSE ? 0 : R - 1];
    __syncthreads();
    float offset = 0.0f;
#pragma unroll
    for (int p = 0; p < kParts; ++p)
      if (REVERSE ? p > part : p < part) offset += scratch[p * D + c];
#pragma unroll
    for (int r = 0; r < R; ++r) x[r] += offset;
  }
};

// The chunk's gates of head h (fp32 [B, T, H, D]) as cumulative log2 sums into dst[64][ldf]. Rows past L
// are zero gates, so b stays constant there and row 63 holds the chunk's total. Ends with a barrier.
template <int D>
__device__ __forceinline__ void load_cumulative_gates(float* dst, float* scratch, const float* g, int64_t b, int64_t t0,
                                                      int L, int64_t T_len, int H, int h) {
  using Scan = ColumnScan<D>;
  const int c = Scan::column(), r0 = Scan::first_row();
  float x[Scan::R];
#pragma unroll
  for (int r = 0; r < Scan::R; ++r) {
    const int t = r0 + r;
    x[r] = t < L ? g[((b * T_len + t0 + t) * H + h) * int64_t(D) + c] * kLog2e : 0.0f;
  }
  Scan::scan(x, scratch);
#pragma unroll
  for (int r = 0; r < Scan::R; ++r) dst[(r0 + r) * ldf<D>() + c] = x[r];
  __syncthreads();
}

// A bf16 [D][D] state (key x value) into dst[D][ldb].
template <int D>
__device__ __forceinline__ void load_state(bf16* dst, const bf16* src) {
  constexpr int V = D / 8, ITER = D * V / kThreads;  // every load issued before the first store
  uint4 x[ITER];
#pragma unroll
  for (int k = 0; k < ITER; ++k) {
    const int i = threadIdx.x + k * kThreads;
    x[k] = *reinterpret_cast<const uint4*>(src + int64_t(i / V) * D + i % V * 8);
  }
#pragma unroll
  for (int k = 0; k < ITER; ++k) {
    const int i = threadIdx.x + k * kThreads;
    *reinterpret_cast<uint4*>(dst + i / V * ldb<D>() + i % V * 8) = x[k];
  }
}

template <typename Layout>
__device__ __forceinline__ int element_offset(int row, int col, int ld) {
  if constexpr (std::is_same_v<Layout, wm::row_major>)
    return row * ld + col;
  else
    return col * ld + row;
}

// One 16 x 16 output tile: C(i0.., j0..) (+)= sum over K of A(i0.., k) B(k, j0..). A is [M x K] and B
// [K x N] in the given layouts (row_major: (r, c) at r ld + c; col_major: at c ld + r); C fp32 row-major.
template <typename LayoutA, typename LayoutB, typename CT>
__device__ __forceinline__ void tile_product(int i0, int j0, int K, const bf16* A, int lda, const bf16* B, int ldb_,
                                             CT* Cm, int ldc, bool accumulate) {
  wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
  if (accumulate)
    wm::load_matrix_sync(acc, Cm + int64_t(i0) * ldc + j0, ldc, wm::mem_row_major);
  else
    wm::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < K; k0 += 16) {
    wm::fragment<wm::matrix_a, 16, 16, 16, bf16, LayoutA> a;
    wm::fragment<wm::matrix_b, 16, 16, 16, bf16, LayoutB> bfrag;
    wm::load_matrix_sync(a, A + element_offset<LayoutA>(i0, k0, lda), lda);
    wm::load_matrix_sync(bfrag, B + element_offset<LayoutB>(k0, j0, ldb_), ldb_);
    wm::mma_sync(acc, a, bfrag, acc);
  }
  wm::store_matrix_sync(Cm + int64_t(i0) * ldc + j0, acc, ldc, wm::mem_row_major);
}

// C[M x N] (+)= A[M x K] B[K x N] over the block's warps, one output tile per warp at a time.
template <typename LayoutA, typename LayoutB, typename CT>
__device__ __forceinline__ void block_product(int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb_,
                                              CT* Cm, int ldc, bool accumulate) {
  const int warp = threadIdx.x / 32, tiles_n = N / 16;
  for (int tile = warp; tile < (M / 16) * tiles_n; tile += kWarps)
    tile_product<LayoutA, LayoutB>(tile / tiles_n * 16, tile % tiles_n * 16, K, A, lda, B, ldb_, Cm, ldc, accumulate);
}

}  // namespace fathom::cuda::dsla_tc
