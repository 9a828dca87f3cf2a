// The skinny GEMM y [M, N] = x [M, K] W [N, K]^T for M <= 32: a stream over W at full memory width.
//
// Work split. A CTA of 8 warps owns `row_tiles` tiles of 16 rows of W (16 * row_tiles outputs n); the
// 8 / row_tiles warps of a tile ("k_splits") split K between them and the CTA adds their partial sums in
// shared memory, in a fixed order (deterministic). K is walked in chunks of 32 elements: the warp of
// split s takes chunks s, s + k_splits, s + 2 k_splits, ..., kUnroll chunks per step, so the warps of one
// tile read neighbouring 64-byte pieces of each row, and every lane has 10 to 24 16-byte loads in
// flight before its first product. The host picks row_tiles: as many tiles per CTA
// (fewer splits) as still leave two CTAs per SM, so a narrow W (o_proj, down_proj: N = 2048, 128 tiles)
// still spreads over every SM through split-K, and the wide LM head (6272 tiles) runs without it.
//
// Thread -> data. The product runs on the tensor cores (mma m16n8k16, f32 accumulation): W's 16 rows are
// A, 8 tokens of x are B. Lane (g, t) = (lane / 4, lane % 4) loads, at k = 32 chunk + 8 t .. 8 t + 7,
// W[row g], W[row g + 8] and x[token 8 j + g] of each 8-token tile j: one 16-byte load each. Those 8
// values feed two MMAs: the fragment's logical k {2t, 2t+1, 2t+8, 2t+9} stands for physical k
// 8t + {0, 1, 2, 3} in the first and 8t + {4, 5, 6, 7} in the second. A and B permute k the same way and
// a dot product does not care about the order of its terms, so W and x go from global memory straight
// into fragments: no shared-memory staging, no ldmatrix. The accumulator's (row g / g + 8, column 2t, 2t+1)
// are outputs (n0 + g / n0 + g + 8, token 8 j + 2t, 8 j + 2t + 1).
//
// Caching. W is read once: streamed with L1::no_allocate. x (at most 32 x 8192 bf16, 512 KiB) is read
// by every CTA: through the read-only path, so it stays in L1 for the CTAs an SM runs and comes from L2
// about once per SM. Shared memory would gain nothing for x: with split-K each warp of a CTA reads a
// different part of it, so there is no reuse inside a CTA to stage, only across CTAs, which L1 serves.
//
// Dependent launch. Where FATHOM_DEPENDENT_LAUNCH is on, the kernel is a programmatic dependent launch
// (kernels/runtime/dependent_launch.cuh): its CTAs start while the kernel ahead (a norm, SwiGLU,
// attention's combine) finishes, ask L2 for their first step of W where skinny_prefetches says so (short rows, or
// K split across a cluster: skinny_matmul.h), and only then wait for x. Once its loads are done a CTA lets the next
// kernel start. A decoding step's memory traffic then has no gap at each launch; the arithmetic, and so every bit of
// y, is the same. Long rows are not asked for: there a CTA's first step is its whole rows, tens of megabytes for the
// first wave of a 1B layer's q/k/v or gate/up, requested while the launch ahead still needs the memory system.
//
// Groups. skinny_matmul_grouped multiplies one x by up to kSkinnyMatmulMaxGroup weights (a layer's
// q/k/v or gate/up) in one launch: the grid is the concatenation of each weight's own CTAs, with the
// row_tiles a call of its own would pick, so every output equals its single call bit for bit (where that call does
// not split K across CTAs, below) and a decoding step saves the launches and the tails between them.
//
// SwiGLU. skinny_swiglu multiplies x by gate_proj's and up_proj's weights and writes silu(gate) * up, not
// the two products: a CTA of 16 warps is the two CTAs that would take the same rows of each weight, side
// by side, so every tile splits K and sums as in its own product's launch; its epilogue rounds each sum
// to BF16, as the products would be stored, then gates them as the SwiGLU kernel does. The output is
// SwiGLU's of the two products bit for bit, with one launch fewer a layer and neither product written.
// It is asked for (FATHOM_SWIGLU_PROJECTION=fused), not the default: on an H100 it made the 190M's
// batch-1 decoding step 4% faster and the 1B's 3% slower, and with the residual step inside it (below) it changed no
// model's step clear of the spread. Not for want of registers: at one 8-token tile ptxas gives the 16-warp CTA 58 per
// thread against the 8-warp kernel's 64, with no spills.
//
// Residual step. skinny_matmul_after_residual_step begins with a block's residual step (the norm that joins a
// sublayer's output to the stream) instead of reading x: after the wait every CTA computes the step's M rows
// itself, in the order of sums the norm kernels use (rms_norm_forward's block of 256 threads over 16-byte
// packs post-norm, add_rms_norm's element loop pre-norm) and with their roundings (rms_norm_math.cuh), stages
// what the next sublayer reads in shared memory, and CTA 0 writes h. The products then read x from shared
// memory. Each CTA repeats a few kilobytes of the step's reads, from L2, in place of a launch and a dependency.
// skinny_swiglu_after_residual_step is the gated form: a SwiGLU CTA's first 256 threads do the step (so its sums
// keep the norm kernel's order) while the other 256 wait at its barriers, then all 16 warps read the staged row.
//
// K across CTAs (FATHOM_SKINNY_SPLIT_K_CTAS, skinny_matmul.h). A one-weight launch too narrow for two CTAs of its own
// rows an SM (o_proj and down_proj while decoding: 128 tiles at d 2048, 48 at 768) may give each tile a thread-block
// cluster of C CTAs: warp w of rank q takes split q k_splits + w of C k_splits, each CTA adds its warps' partial sums
// as above, ranks past 0 store theirs into rank 0's shared memory (kernels/hopper/cluster.cuh), and rank 0 adds them
// in rank order and writes y. Deterministic, but its sums are not the one-CTA launch's. By default only where the
// tiles leave half the SMs idle and every warp keeps two chunks of K (skinny_split_k_ctas_for: the 190M's down_proj,
// not its o_proj nor the 1B's 128 tiles): there the extra SMs' bandwidth pays for the merge.
//
// Registers. Left to itself ptxas gives the plain kernel 64 registers a thread (four CTAs an SM), too few to hold a
// step's 24 loads a lane at one tile, so it issues them in parts; held to one CTA an SM it takes 128 and issues all
// 24 before the first MMA. One-weight, one-tile launches take that form (skinny_matmul_deep_kernel). On an H100 it took
// the 1B's down_proj (128 CTAs, one an SM) from 16.6 to 14.1 us a layer and the LM heads 2-4 us lower, and changed
// neither o_proj. The cluster kernel and grouped launches keep ptxas' choice: given 128 registers, the 190M's down_proj
// split in clusters of 5 went from 4.6 to 7.2 us (bench/results/2026-12-07_skinny_registers_h100.md).
//
// Alignment. The 16-byte path needs x and W 16-byte aligned and K a multiple of 8 (so every row is);
// otherwise the same kernel loads each element on its own (kVector false). The last, partial chunk of
// a K that is not a multiple of 32 always takes the element loads, zero past K.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention/attention_mma.cuh"
#include "kernels/hopper/cluster.cuh"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm_math.cuh"
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kWarps = kSkinnyCtaWarps;
constexpr int kThreads = kWarps * 32;
// Threads per CTA: a gated one is two plain CTAs side by side ("SwiGLU" above).
__host__ __device__ constexpr int cta_threads(bool gated) { return gated ? 2 * kThreads : kThreads; }
constexpr int kRows = kSkinnyTileRows;
constexpr int kChunk = kSkinnyChunk;
constexpr int kMinCtasPerSm = kSkinnyMinCtasPerSm;

// Eight consecutive bf16 of a W row, streamed past L1 (read once).
__device__ __forceinline__ uint4 load_streaming(const __nv_bfloat16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Eight consecutive bf16 of an x row through the read-only cache (reused by every CTA of the SM).
__device__ __forceinline__ uint4 load_cached(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// row[k .. k + 7] one element at a time, zero at and past K: unaligned operands and the last chunk.
__device__ __forceinline__ uint4 load_elements(const __nv_bfloat16* row, int k, int K) {
  const auto* bits = reinterpret_cast<const unsigned short*>(row);
  uint32_t v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = k + i < K ? uint32_t(__ldg(bits + k + i)) : 0u;
  return make_uint4(v[0] | v[1] << 16, v[2] | v[3] << 16, v[4] | v[5] << 16, v[6] | v[7] << 16);
}

// One lane's 8 elements of one row at k (a multiple of 8).
template <bool kVector, bool kStreaming>
__device__ __forceinline__ uint4 load_eight(const __nv_bfloat16* row, int k, int K) {
  if constexpr (kVector) return kStreaming ? load_streaming(row + k) : load_cached(row + k);
  return load_elements(row, k, K);
}

// The two MMAs of one chunk for one 8-token tile (the k permutation in the file comment).
__device__ __forceinline__ void mma_chunk(float (&acc)[4], const uint4& w_lo, const uint4& w_hi, const uint4& x) {
  const uint32_t first[4] = {w_lo.x, w_hi.x, w_lo.y, w_hi.y};
  flash::mma_16816(acc, first, x.x, x.y);
  const uint32_t second[4] = {w_lo.z, w_hi.z, w_lo.w, w_hi.w};
  flash::mma_16816(acc, second, x.z, x.w);
}

// The residual step a launch may begin with ("Residual step" above).
enum class Step { none, post_norm, pre_norm };
struct ResidualStepArgs {
  const __nv_bfloat16 *residual, *x, *weight;  // [M, K], [M, K], [K]
  __nv_bfloat16* h;                            // [M, K]: the stream after the step, written by CTA 0
  float eps;
};

// The step's rows into `staged` [M, K] (what the next sublayer reads), h by CTA 0; M <= kResidualStepMaxRows,
// 256 < K <= kResidualStepMaxWidth, K a multiple of 8. The CTA's first kThreads threads do the work (a gated CTA's
// other half only meets the barriers), so each row's sum of squares is added as the norm kernel adds it: the
// threads' partial sums in their order, then block_sum's warp_sum, warp partials, warp_sum. Every load goes out
// before the first is used, and each thread keeps its share of the rows in registers through the barrier: one
// round trip to L2.
template <Step kStep, bool kGated>
__device__ void residual_step(const ResidualStepArgs& s, __nv_bfloat16* staged, int M, int K) {
  constexpr int kMaxRows = int(kResidualStepMaxRows);
  // Post-norm: 16-byte packs tid, tid + kThreads, ... (rms_norm_forward_kernel<256, 8>); pre-norm: elements
  // tid, tid + kThreads, ... (add_rms_norm_forward_kernel).
  constexpr int kPer = int(kResidualStepMaxWidth) / kThreads / (kStep == Step::post_norm ? 8 : 1);
  constexpr int kWidth = kStep == Step::post_norm ? 8 : 1;
  using P = Pack<__nv_bfloat16, kWidth>;
  __shared__ float warp_sums[kMaxRows][kWarps];
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const bool works = !kGated || tid < kThreads;
  // Past K for the threads that do no work, so every loop below leaves at once.
  const auto column = [&](int i) { return works ? (tid + i * kThreads) * kWidth : K; };
  P r[kMaxRows][kPer], x[kMaxRows][kPer], w[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (column(i) >= K) break;
    w[i] = load_pack<kWidth>(s.weight + column(i));
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m)
      if (m < M) {
        r[m][i] = load_pack<kWidth>(s.residual + int64_t(m) * K + column(i));
        x[m][i] = load_pack<kWidth>(s.x + int64_t(m) * K + column(i));
      }
  }
  // The sums of squares: of x post-norm, of the rounded sums pre-norm.
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    if (m >= M) break;
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (column(i) >= K) break;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        const float v =
            kStep == Step::post_norm ? to_float(x[m][i].v[k]) : to_float(rms::rounded_sum(r[m][i].v[k], x[m][i].v[k]));
        ss += v * v;
      }
    }
    ss = warp_sum(ss);
    if (lane == 0 && works) warp_sums[m][warp] = ss;
  }
  __syncthreads();
  const bool writes_h = blockIdx.x == 0;
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    if (m >= M) break;
    const float rstd = rms::rstd(warp_sum(lane < kWarps ? warp_sums[m][lane] : 0.f), K, s.eps);
    const int64_t row = int64_t(m) * K;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (column(i) >= K) break;
      P in, h;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        if constexpr (kStep == Step::post_norm) {
          h.v[k] = rms::residual_normed(to_float(r[m][i].v[k]), x[m][i].v[k], rstd, w[i].v[k]);
          in.v[k] = h.v[k];
        } else {
          h.v[k] = rms::rounded_sum(r[m][i].v[k], x[m][i].v[k]);
          in.v[k] = rms::normed(h.v[k], rstd, w[i].v[k]);
        }
      }
      store_pack<kWidth>(staged + row + column(i), in);
      if (writes_h) store_pack<kWidth>(s.h + row + column(i), h);
    }
  }
  __syncthreads();
}

// The weights of one launch: weight i is w[i] [n[i], K] into y[i] [M, n[i]], run by CTAs
// first_cta[i] .. first_cta[i + 1] - 1 with row_tiles[i] tiles each.
template <typename Out>
struct SkinnyGroup {
  const __nv_bfloat16* w[kSkinnyMatmulMaxGroup];
  Out* y[kSkinnyMatmulMaxGroup];
  int n[kSkinnyMatmulMaxGroup];
  int row_tiles[kSkinnyMatmulMaxGroup];
  int first_cta[kSkinnyMatmulMaxGroup + 1];
  int count;
  int split_ctas;  // CTAs (a cluster) that split K for one tile of rows: 1, or more in a kClustered launch
  bool prefetch;   // whether CTAs ask L2 for their first step of W before the wait (skinny_prefetches)
};

// kTiles 8-token tiles cover the M <= 8 kTiles rows of x; Out is y's element type. kGated: the group is
// (gate, up) with one output, silu(x gate^T) * x up^T ("SwiGLU" above); a CTA's row_tiles tiles of each.
// kStep: x is not read but made by the residual step ("Residual step" above; one tile, kVector, K % kChunk 0); with
// kGated too, the step then SwiGLU of gate/up in one launch.
// kClustered: the CTAs of a cluster, group.split_ctas of them, split K for one tile ("K across CTAs" above).
template <int kTiles, bool kVector, typename Out, bool kGated, Step kStep, bool kClustered = false>
__device__ __forceinline__ void skinny_matmul_body(const __nv_bfloat16* __restrict__ x, const SkinnyGroup<Out>& group,
                                                   int M, int K, const ResidualStepArgs& step) {
  static_assert(kStep == Step::none || (kTiles == 1 && kVector), "the step's launch: one tile, 16 bytes");
  static_assert(!kClustered || (!kGated && kStep == Step::none), "K across CTAs: plain one-weight launches");
  if constexpr (kClustered) cluster_arrive_relaxed();  // this CTA has started (cluster.cuh)
  constexpr bool kStaged = kStep != Step::none;
  // This CTA's weight, and its place among that weight's CTAs.
  int member = 0;
  while (member + 1 < group.count && int(blockIdx.x) >= group.first_cta[member + 1]) ++member;
  const int cta = int(blockIdx.x) - group.first_cta[member];
  // The CTA's rows, and its rank among the CTAs that split their K (0 of 1 unless kClustered).
  const int split_ctas = kClustered ? group.split_ctas : 1;
  const int row_cta = cta / split_ctas, rank = cta % split_ctas;
  Out* __restrict__ y = group.y[member];
  const int N = group.n[member], row_tiles = group.row_tiles[member];
  const int cta_tiles = kGated ? 2 * row_tiles : row_tiles;  // gated: row_tiles of gate's, then of up's
  // Chunks per step: 16-byte loads in flight per lane are kUnroll * (2 + kTiles), 24 at one tile (M <= 8,
  // batch-1 decoding, where a narrow W runs one CTA per SM and needs the most bytes in flight), 16 at two,
  // 10 and 12 at three and four (where the registers of x's fragments set the limit).
  constexpr int kUnroll = kTiles == 1 ? 8 : kTiles == 2 ? 4 : 2;
  constexpr int kCols = 8 * kTiles;
  constexpr int kCtaWarps = cta_threads(kGated) / 32;
  __shared__ float partial[kCtaWarps][kRows][kCols];

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int k_splits = kCtaWarps / cta_tiles;
  const int tile = warp / k_splits, split = warp % k_splits;
  // The tile's splits over all its CTAs, and this warp's among them.
  const int all_splits = k_splits * split_ctas, my_split = rank * k_splits + split;
  const __nv_bfloat16* __restrict__ w = group.w[kGated ? tile / row_tiles : member];
  const int n0 = (row_cta * row_tiles + tile % row_tiles) * kRows;

  // Rows past N (of W) and past M (of x) read the last real row instead: an MMA's output row r depends
  // only on A's row r and its column c only on B's column c, so their sums are garbage no one stores,
  // and every load of the loop below is unconditional (no branches between the loads and the MMAs).
  const __nv_bfloat16* w_lo = w + int64_t(min(n0 + g, N - 1)) * K;
  const __nv_bfloat16* w_hi = w + int64_t(min(n0 + g + 8, N - 1)) * K;
  const __nv_bfloat16* x_row[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) x_row[j] = x + int64_t(min(8 * j + g, M - 1)) * K;

  // No grid ahead writes W (dependent_launch.cuh): the CTA may ask L2 for its rows' first step of W (rank 0 for
  // its cluster), then waits for the kernel ahead before it reads x.
  if (kVector && rank == 0 && group.prefetch) {
    const int cta_rows = kRows * row_tiles, first_row = row_cta * cta_rows;
    const int64_t first_step = min(int64_t(K), int64_t(kUnroll) * all_splits * kChunk);
    const int r = int(threadIdx.x) % cta_rows, weight = kGated ? int(threadIdx.x) / cta_rows : member;
    if (int(threadIdx.x) < cta_rows * (kGated ? 2 : 1) && first_row + r < N)
      prefetch_to_l2(group.w[weight] + int64_t(first_row + r) * K, unsigned(first_step * 2));
  }
  wait_for_previous_grid();
  if constexpr (kStaged) {  // x is made here, into shared memory
    extern __shared__ __align__(16) unsigned char staged_bytes[];
    const auto* staged = reinterpret_cast<__nv_bfloat16*>(staged_bytes);
    residual_step<kStep, kGated>(step, const_cast<__nv_bfloat16*>(staged), M, K);
    x_row[0] = staged + int64_t(min(g, M - 1)) * K;
  }
  // x's eight elements at k: from the staged rows, or through the read-only path.
  const auto load_x = [&](int j, int k) {
    if constexpr (kStaged) return *reinterpret_cast<const uint4*>(x_row[j] + k);
    return load_eight<kVector, false>(x_row[j], k, K);
  };

  float acc[kTiles][4] = {};
  // One chunk's loads and products (the remainder steps below).
  const auto one_chunk = [&](int c) {
    const int k = c * kChunk + 8 * t;
    const uint4 wl = load_eight<kVector, true>(w_lo, k, K), wh = load_eight<kVector, true>(w_hi, k, K);
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mma_chunk(acc[j], wl, wh, load_x(j, k));
  };
  const int full_chunks = K / kChunk;
  int c = my_split;
  // Whole steps: kUnroll chunks, every load issued before the first product.
  for (; c + (kUnroll - 1) * all_splits < full_chunks; c += kUnroll * all_splits) {
    uint4 wl[kUnroll], wh[kUnroll], xv[kUnroll][kTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (c + u * all_splits) * kChunk + 8 * t;
      wl[u] = load_eight<kVector, true>(w_lo, k, K);
      wh[u] = load_eight<kVector, true>(w_hi, k, K);
#pragma unroll
      for (int j = 0; j < kTiles; ++j) xv[u][j] = load_x(j, k);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kTiles; ++j) mma_chunk(acc[j], wl[u], wh[u], xv[u][j]);
  }
  for (; c < full_chunks; c += all_splits) one_chunk(c);  // fewer than kUnroll left
  // The partial last chunk (element loads, zero past K), by the split whose turn it is: warp-uniform,
  // as the MMA needs the whole warp.
  if (!kStaged && K % kChunk != 0 && my_split == full_chunks % all_splits) {
    const int k = full_chunks * kChunk + 8 * t;
    const uint4 wl = load_elements(w_lo, k, K), wh = load_elements(w_hi, k, K);
#pragma unroll
    for (int j = 0; j < kTiles; ++j) mma_chunk(acc[j], wl, wh, load_elements(x_row[j], k, K));
  }

  // Every load is done: the next kernel may take the SMs this CTA leaves.
  allow_dependent_grids();
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    partial[warp][g][8 * j + 2 * t] = acc[j][0];
    partial[warp][g][8 * j + 2 * t + 1] = acc[j][1];
    partial[warp][g + 8][8 * j + 2 * t] = acc[j][2];
    partial[warp][g + 8][8 * j + 2 * t + 1] = acc[j][3];
  }
  __syncthreads();
  // Thread i writes outputs i, i + kThreads, ... of the CTA's [M, 16 row_tiles] block, n fastest, so
  // neighbouring threads store neighbouring outputs; the splits of a tile are added in order.
  const int cta_rows = kRows * row_tiles;
  const auto tile_sum = [&](int tile_of_cta, int r, int m) {
    float sum = 0.f;
    for (int s = 0; s < k_splits; ++s) sum += partial[tile_of_cta * k_splits + s][r % kRows][m];
    return sum;
  };
  // K across CTAs: each rank past 0 stores its CTA's sums (one tile: row_tiles is 1) into rank 0's peer_sums.
  __shared__ float peer_sums[kClustered ? kSkinnySplitKMaxCtas - 1 : 1][kRows][kClustered ? kCols : 1];
  if constexpr (kClustered) {
    cluster_wait_acquire();  // every CTA of the cluster has started
    if (rank != 0)
      for (int i = int(threadIdx.x); i < M * kRows; i += kThreads)
        *cluster_peer(&peer_sums[rank - 1][i % kRows][i / kRows], 0) = tile_sum(0, i % kRows, i / kRows);
    cluster_arrive_release();
    cluster_wait_acquire();
    if (rank != 0) return;
  }
  for (int i = int(threadIdx.x); i < M * cta_rows; i += kCtaWarps * 32) {
    const int m = i / cta_rows, r = i % cta_rows;
    const int n = row_cta * cta_rows + r;
    if (n >= N) continue;
    if constexpr (kGated) {
      // Each product rounded as it would be stored, then gated as the SwiGLU kernel does.
      const float g = to_float(from_float<Out>(tile_sum(r / kRows, r, m)));
      const float u = to_float(from_float<Out>(tile_sum(row_tiles + r / kRows, r, m)));
      y[int64_t(m) * N + n] = from_float<Out>(swiglu_value(g, u));
    } else {
      float sum = tile_sum(r / kRows, r, m);
      if constexpr (kClustered)
        for (int q = 1; q < split_ctas; ++q) sum += peer_sums[q - 1][r][m];
      y[int64_t(m) * N + n] = from_float<Out>(sum);
    }
  }
}

template <int kTiles, bool kVector, typename Out, bool kGated = false, bool kClustered = false>
__global__ void __launch_bounds__(cta_threads(kGated))
    skinny_matmul_kernel(const __nv_bfloat16* __restrict__ x, const __grid_constant__ SkinnyGroup<Out> group, int M,
                         int K) {
  skinny_matmul_body<kTiles, kVector, Out, kGated, Step::none, kClustered>(x, group, M, K, ResidualStepArgs{});
}

// The plain kernel for a launch of one weight and one 8-token tile (M <= 8) with 16-byte loads, not split across CTAs
// ("Registers" above): held to at least one CTA an SM, so ptxas gives it 128 registers a thread.
template <typename Out>
__global__ void __launch_bounds__(kThreads, 1)
    skinny_matmul_deep_kernel(const __nv_bfloat16* __restrict__ x, const __grid_constant__ SkinnyGroup<Out> group,
                              int M, int K) {
  skinny_matmul_body<1, true, Out, false, Step::none>(x, group, M, K, ResidualStepArgs{});
}

// The launch that begins with the residual step, held to the plain kernel's registers (64 a thread, four CTAs
// an SM) so that the step's rows kept through its barrier cost no occupancy in the stream over W.
template <Step kStep>
__global__ void __launch_bounds__(kThreads, 4)
    skinny_matmul_step_kernel(const __grid_constant__ SkinnyGroup<__nv_bfloat16> group, int M, int K,
                              const __grid_constant__ ResidualStepArgs step) {
  skinny_matmul_body<1, true, __nv_bfloat16, false, kStep>(step.x, group, M, K, step);
}

// The same for gate/up and SwiGLU ("SwiGLU" above): 16 warps a CTA, two CTAs an SM for the same 64 registers a thread.
template <Step kStep>
__global__ void __launch_bounds__(cta_threads(true), 2)
    skinny_swiglu_step_kernel(const __grid_constant__ SkinnyGroup<__nv_bfloat16> group, int M, int K,
                              const __grid_constant__ ResidualStepArgs step) {
  skinny_matmul_body<1, true, __nv_bfloat16, true, kStep>(step.x, group, M, K, step);
}

// Tiles of 16 rows per CTA: double while that still leaves kMinCtasPerSm CTAs per SM, or while the
// splits would outnumber K's chunks (a short K gives split-K nothing to share).
int pick_row_tiles(int64_t N, int64_t K, int sm_count) {
  const int64_t tiles = (N + kRows - 1) / kRows, chunks = (K + kChunk - 1) / kChunk;
  int row_tiles = 1;
  while (row_tiles < kWarps) {
    const int64_t ctas_if_doubled = (tiles + 2 * row_tiles - 1) / (2 * row_tiles);
    const bool enough_ctas = ctas_if_doubled >= int64_t(kMinCtasPerSm) * sm_count;
    const bool too_many_splits = kWarps / row_tiles > chunks;
    if (!enough_ctas && !too_many_splits) break;
    row_tiles *= 2;
  }
  return row_tiles;
}

// x W^T for each weight of ws, in one launch; gated: ws is (gate, up) and ys the one output of SwiGLU; with a
// step (kStep), x is the step's x, whose rows the step turns into the products' input.
template <int kTiles, typename Out, Step kStep = Step::none>
void launch(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys, bool gated, cudaStream_t stream,
            const ResidualStepArgs& step = {}) {
  const int M = int(x.dim(0)), K = int(x.dim(1));
  const int sm_count = device_properties(x.device().index).multiProcessorCount;
  const auto* xp = static_cast<const __nv_bfloat16*>(x.raw());
  SkinnyGroup<Out> group{};
  bool vector = aligned_to(16, xp) && K % 8 == 0;
  int64_t ctas = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const int N = int(ws[i].dim(0)), row_tiles = pick_row_tiles(N, K, sm_count);
    group.w[i] = static_cast<const __nv_bfloat16*>(ws[i].raw());
    group.y[i] = static_cast<Out*>(ys[gated ? 0 : i].raw());
    group.n[i] = N;
    group.row_tiles[i] = row_tiles;
    group.first_cta[i] = int(ctas);
    vector = vector && aligned_to(16, group.w[i]);
    if (!gated || i == 0) ctas += (int64_t(N) + kRows * row_tiles - 1) / (kRows * row_tiles);  // gated: up rides along
  }
  group.count = int(ws.size());
  group.split_ctas = 1;
  // K across the CTAs of a cluster ("K across CTAs" above): one plain weight of one tile a CTA, 16-byte loads.
  const int split_choice = skinny_split_k_ctas();
  if (split_choice != 1 && kStep == Step::none && !gated && ws.size() == 1 && group.row_tiles[0] == 1 && vector &&
      supports_sm90_launches(x.device().index)) {
    group.split_ctas = skinny_split_k_ctas_for(split_choice, group.n[0], K, sm_count);
    ctas *= group.split_ctas;
  }
  group.first_cta[group.count] = int(ctas);
  group.prefetch = skinny_prefetches(skinny_l2_prefetch(), K, group.split_ctas);
  const auto run = [&](auto kernel, int threads) {
    launch_kernel(kernel, dim3(unsigned(ctas)), dim3(unsigned(threads)), 0, stream, xp, group, M, K);
  };
  const int staged_bytes = M * K * int(sizeof(__nv_bfloat16));
  if constexpr (kStep != Step::none) {
    if (gated)
      launch_kernel(skinny_swiglu_step_kernel<kStep>, dim3(unsigned(ctas)), dim3(unsigned(cta_threads(true))),
                    staged_bytes, stream, group, M, K, step);
    else
      launch_kernel(skinny_matmul_step_kernel<kStep>, dim3(unsigned(ctas)), dim3(unsigned(kThreads)), staged_bytes,
                    stream, group, M, K, step);
  } else if (gated)
    vector ? run(skinny_matmul_kernel<kTiles, true, Out, true>, cta_threads(true))
           : run(skinny_matmul_kernel<kTiles, false, Out, true>, cta_threads(true));
  else if (group.split_ctas > 1)
    launch_kernel_in_clusters(skinny_matmul_kernel<kTiles, true, Out, false, true>, dim3(unsigned(ctas)),
                              dim3(unsigned(kThreads)), 0, stream, unsigned(group.split_ctas), xp, group, M, K);
  else if (!vector)
    run(skinny_matmul_kernel<kTiles, false, Out>, kThreads);
  else if (kTiles == 1 && ws.size() == 1)
    run(skinny_matmul_deep_kernel<Out>, kThreads);
  else
    run(skinny_matmul_kernel<kTiles, true, Out>, kThreads);
}

template <typename Out>
void launch_for_rows(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys, bool gated,
                     cudaStream_t stream) {
  switch ((x.dim(0) + 7) / 8) {
    case 1:
      return launch<1, Out>(x, ws, ys, gated, stream);
    case 2:
      return launch<2, Out>(x, ws, ys, gated, stream);
    case 3:
      return launch<3, Out>(x, ws, ys, gated, stream);
    default:
      return launch<4, Out>(x, ws, ys, gated, stream);
  }
}

void launch_for_dtype(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys, bool gated) {
  cudaStream_t stream = stream_for(x.device());
  if (ys[0].dtype() == DType::f32)
    launch_for_rows<float>(x, ws, ys, gated, stream);
  else
    launch_for_rows<__nv_bfloat16>(x, ws, ys, gated, stream);
}

// The products of x by ws into ys, in one launch: members with no outputs take no CTAs, and an empty K
// is an empty sum.
void run_products(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) {
  std::vector<Tensor> w_run, y_run;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (ys[i].numel() == 0) continue;
    if (x.dim(1) == 0) {
      ys[i].zero_();
      continue;
    }
    w_run.push_back(ws[i]);
    y_run.push_back(ys[i]);
  }
  if (!w_run.empty()) launch_for_dtype(x, w_run, y_run, false);
}

// The step, then the products (gated: SwiGLU of ws = gate, up into ys[0]). residual_step_fits held (the front checked
// it): one row of at most kResidualStepMaxWidth, 16-byte rows, no empty weight.
void launch_after_residual_step(const ResidualStepInputs& step, std::span<const Tensor> ws, std::span<Tensor> ys,
                                bool gated, Tensor& h) {
  const ResidualStepArgs args{
      static_cast<const __nv_bfloat16*>(step.residual.raw()), static_cast<const __nv_bfloat16*>(step.x.raw()),
      static_cast<const __nv_bfloat16*>(step.weight.raw()), static_cast<__nv_bfloat16*>(h.raw()), float(step.eps)};
  cudaStream_t stream = stream_for(step.x.device());
  if (step.kind == ResidualStep::post_norm)
    launch<1, __nv_bfloat16, Step::post_norm>(step.x, ws, ys, gated, stream, args);
  else
    launch<1, __nv_bfloat16, Step::pre_norm>(step.x, ws, ys, gated, stream, args);
}

}  // namespace

void skinny_matmul_grouped(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) {
  run_products(x, ws, ys);
}

void skinny_matmul(const Tensor& x, const Tensor& w, Tensor& y) { run_products(x, {&w, 1}, {&y, 1}); }

void skinny_matmul_after_residual_step(const ResidualStepInputs& step, std::span<const Tensor> ws, std::span<Tensor> ys,
                                       Tensor& h) {
  launch_after_residual_step(step, ws, ys, false, h);
}

void skinny_swiglu_after_residual_step(const ResidualStepInputs& step, const Tensor& gate, const Tensor& up, Tensor& y,
                                       Tensor& h) {
  const Tensor ws[2] = {gate, up};
  launch_after_residual_step(step, ws, {&y, 1}, true, h);
}

void skinny_swiglu(const Tensor& x, const Tensor& gate, const Tensor& up, Tensor& y) {
  if (y.numel() == 0) return;
  if (x.dim(1) == 0) {  // silu(0) * 0
    y.zero_();
    return;
  }
  const Tensor ws[2] = {gate, up};
  launch_for_dtype(x, ws, {&y, 1}, true);
}

}  // namespace fathom::cuda
