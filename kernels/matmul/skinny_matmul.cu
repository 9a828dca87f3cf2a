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
// attention's combine) finishes, ask L2 for their first step of W, and only then wait for x. Once its
// loads are done a CTA lets the next kernel start. A decoding step's memory traffic then has no gap at
// each launch; the arithmetic, and so every bit of y, is the same.
//
// Groups. skinny_matmul_grouped multiplies one x by up to kSkinnyMatmulMaxGroup weights (a layer's
// q/k/v or gate/up) in one launch: the grid is the concatenation of each weight's own CTAs, with the
// row_tiles a call of its own would pick, so every output equals its single call bit for bit and a
// decoding step saves the launches and the tails between them.
//
// SwiGLU. skinny_swiglu multiplies x by gate_proj's and up_proj's weights and writes silu(gate) * up, not
// the two products: a CTA of 16 warps is the two CTAs that would take the same rows of each weight, side
// by side, so every tile splits K and sums as in its own product's launch; its epilogue rounds each sum
// to BF16, as the products would be stored, then gates them as the SwiGLU kernel does. The output is
// SwiGLU's of the two products bit for bit, with one launch fewer a layer and neither product written.
// It is asked for (FATHOM_SWIGLU_PROJECTION=fused), not the default: on an H100 it made the 190M's
// batch-1 decoding step 4% faster and the 1B's 3% slower. Not for want of registers: at one 8-token tile
// ptxas gives the 16-warp CTA 58 per thread against the 8-warp kernel's 64, with no spills; the cause is open.
//
// SwiGLU's input. skinny_matmul_of_swiglu multiplies SwiGLU's output (down_proj's input) without it being
// written: x's loads read gate's and up's eight values instead and gate them as the SwiGLU kernel does, rounded
// to BF16 as that kernel stores them, so the output is SwiGLU's kernel then the product's, bit for bit, one
// launch a layer fewer. Every CTA gates the whole of x (two 16 KiB rows at the 1B's width, M = 1): a few
// thousand sigmoids, hidden under its stream over W.
//
// Residual step. skinny_matmul_after_residual_step begins with a block's residual step (the norm that joins a
// sublayer's output to the stream) instead of reading x: after the wait every CTA computes the step's M rows
// itself, in the order of sums the norm kernels use (rms_norm_forward's block of 256 threads over 16-byte
// packs post-norm, add_rms_norm's element loop pre-norm) and with their roundings (rms_norm_math.cuh), stages
// what the next sublayer reads in shared memory, and CTA 0 writes h. The products then read x from shared
// memory. Each CTA repeats a few kilobytes of the step's reads, from L2, in place of a launch and a dependency.
//
// Ring. Where FATHOM_SKINNY_RING is on, a CTA's rows of W come through shared memory instead of registers: a
// ring of four 16 KiB stages, each a piece of every row, filled by bulk copies (one a row a stage, issued by
// warp 0, counted in bytes on the stage's barrier). The first four stages are asked for before the CTA waits
// for the kernel ahead, and a stage is refilled as soon as every warp has read it, so a CTA keeps up to 64 KiB
// of W in flight from its first cycle to its last stage without holding any of it in registers, where the
// register path's warps issue a step, wait for all of it, and only then issue the next. The warps read the
// same chunks in the same order and multiply the same values: the outputs are the register path's bit for bit.
//
// Alignment. The 16-byte path needs x and W 16-byte aligned and K a multiple of 8 (so every row is);
// otherwise the same kernel loads each element on its own (kVector false). The last, partial chunk of
// a K that is not a multiple of 32 always takes the element loads, zero past K.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "kernels/attention/attention_mma.cuh"
#include "kernels/hopper/tma.cuh"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm_math.cuh"
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Threads per CTA: a gated one is two plain CTAs side by side ("SwiGLU" above).
__host__ __device__ constexpr int cta_threads(bool gated) { return gated ? 2 * kThreads : kThreads; }
constexpr int kRows = 16;   // rows of W per tile (the MMA's M)
constexpr int kChunk = 32;  // K per warp step: 4 lanes x 8 elements
constexpr int kMinCtasPerSm = 2;

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

// SwiGLU of eight gate and up values, rounded as kernels/swiglu/swiglu.cu rounds it: the x of a product that
// reads SwiGLU's inputs ("SwiGLU's input" above).
__device__ __forceinline__ uint4 swiglu_eight(const uint4& gate, const uint4& up) {
  Pack<__nv_bfloat16, 8> g, u, out;
  static_assert(sizeof(g) == sizeof(uint4), "eight bf16 in one 16-byte load");
  memcpy(&g, &gate, sizeof(g));
  memcpy(&u, &up, sizeof(u));
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float gk = to_float(g.v[k]);
    out.v[k] = from_float<__nv_bfloat16>(gk * sigmoid(gk) * to_float(u.v[k]));
  }
  uint4 bits;
  memcpy(&bits, &out, sizeof(bits));
  return bits;
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
// 256 < K <= kResidualStepMaxWidth, K a multiple of 8, a CTA of kThreads. Each row's sum of squares is added as
// the norm kernel adds it: the threads' partial sums in their order, then block_sum's warp_sum, warp
// partials, warp_sum. Every load goes out before the first is used, and each thread keeps its share of the
// rows in registers through the barrier: one round trip to L2.
template <Step kStep>
__device__ void residual_step(const ResidualStepArgs& s, __nv_bfloat16* staged, int M, int K) {
  constexpr int kMaxRows = int(kResidualStepMaxRows);
  // Post-norm: 16-byte packs tid, tid + kThreads, ... (rms_norm_forward_kernel<256, 8>); pre-norm: elements
  // tid, tid + kThreads, ... (add_rms_norm_forward_kernel).
  constexpr int kPer = int(kResidualStepMaxWidth) / kThreads / (kStep == Step::post_norm ? 8 : 1);
  constexpr int kWidth = kStep == Step::post_norm ? 8 : 1;
  using P = Pack<__nv_bfloat16, kWidth>;
  __shared__ float warp_sums[kMaxRows][kWarps];
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const auto column = [&](int i) { return (tid + i * kThreads) * kWidth; };
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
    if (lane == 0) warp_sums[m][warp] = ss;
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

// W's rows through shared memory ("Ring" above): kRingStages stages of about kRingStageBytes of the CTA's rows,
// each stage a piece of stage_k elements of every row, rows row_stride apart (64 bytes past a multiple of
// 128, so the 8 rows a quarter-warp reads fall in distinct banks), after kRingBarrierBytes of the stages'
// barriers. Warp 0 issues the copies: one bulk copy a row a stage.
constexpr int kRingStages = 4;
constexpr int kRingStageBytes = 16384;
constexpr int kRingBarrierBytes = 128;
__host__ __device__ constexpr int ring_stage_k(int rows) { return kRingStageBytes / 2 / rows; }
__host__ __device__ constexpr int ring_row_stride(int rows) { return ring_stage_k(rows) + 32; }
__host__ __device__ constexpr int ring_bytes(int rows) {
  return kRingBarrierBytes + kRingStages * rows * ring_row_stride(rows) * 2;
}
static_assert(ring_stage_k(kRows * kWarps) % 64 == 0, "a stage's piece of a row: whole chunks, 128-byte multiples");

struct WeightRing {
  flash::StageRing<kRingStages, kWarps> stages;
  unsigned char* base;  // stage 0
  int rows, stage_k, row_stride, count;

  __device__ WeightRing(unsigned char* smem, int rows, int K)
      : stages{uint32_t(__cvta_generic_to_shared(smem))},
        base(smem + kRingBarrierBytes),
        rows(rows),
        stage_k(ring_stage_k(rows)),
        row_stride(ring_row_stride(rows)),
        count((K + stage_k - 1) / stage_k) {}
  __device__ int bytes() const { return ring_bytes(rows); }
  __device__ const __nv_bfloat16* stage(int j) const {
    return reinterpret_cast<const __nv_bfloat16*>(base) + (j % kRingStages) * rows * row_stride;
  }
  // Eight elements of a row of a stage, at k (a multiple of 8) within the stage.
  __device__ uint4 row_piece(const __nv_bfloat16* stage, int row, int k) const {
    return *reinterpret_cast<const uint4*>(stage + row * row_stride + k);
  }
  // By warp 0: stage j's copies, of rows first_row .. first_row + rows - 1 of w [N, K] (past N: the last row,
  // whose sums no one stores), once every warp has released the stage's last occupant.
  __device__ void issue(int j, const __nv_bfloat16* w, int first_row, int N, int K, int lane) const {
    const int k0 = j * stage_k;
    const uint32_t row_bytes = uint32_t(min(stage_k, K - k0)) * 2;
    if (lane == 0) stages.acquire(j, row_bytes * uint32_t(rows));
    __syncwarp();
    const uint32_t dst = stages.bars + kRingBarrierBytes + uint32_t((j % kRingStages) * rows * row_stride * 2);
    for (int r = lane; r < rows; r += 32)
      flash::bulk_load(dst + uint32_t(r * row_stride * 2), w + int64_t(min(first_row + r, N - 1)) * K + k0, row_bytes,
                       stages.full(j));
  }
};

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
};

// kTiles 8-token tiles cover the M <= 8 kTiles rows of x; Out is y's element type. kGated: the group is
// (gate, up) with one output, silu(x gate^T) * x up^T ("SwiGLU" above); a CTA's row_tiles tiles of each.
// kStep: x is not read but made by the residual step ("Residual step" above; one tile, kVector, K % kChunk 0).
// kSwiglu: x is SwiGLU of x (gate) and up, [M, K] each, made as it is read ("SwiGLU's input" above; kVector, K % kChunk
// 0).
template <int kTiles, bool kVector, typename Out, bool kGated, Step kStep, bool kRing, bool kSwiglu = false>
__device__ __forceinline__ void skinny_matmul_body(const __nv_bfloat16* __restrict__ x, const SkinnyGroup<Out>& group,
                                                   int M, int K, const ResidualStepArgs& step,
                                                   const __nv_bfloat16* __restrict__ up = nullptr) {
  static_assert(kStep == Step::none || (kTiles == 1 && kVector && !kGated), "the step's launch: one tile, 16 bytes");
  static_assert(!kRing || (kVector && !kGated), "the ring copies 16-byte rows of one weight a CTA");
  static_assert(!kSwiglu || (kVector && !kGated && kStep == Step::none), "SwiGLU's input: 16-byte rows of x");
  constexpr bool kStaged = kStep != Step::none;
  extern __shared__ __align__(128) unsigned char dynamic_smem[];
  // This CTA's weight, and its place among that weight's CTAs.
  int member = 0;
  while (member + 1 < group.count && int(blockIdx.x) >= group.first_cta[member + 1]) ++member;
  const int cta = int(blockIdx.x) - group.first_cta[member];
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
  const __nv_bfloat16* __restrict__ w = group.w[kGated ? tile / row_tiles : member];
  const int n0 = (cta * row_tiles + tile % row_tiles) * kRows;

  // Rows past N (of W) and past M (of x) read the last real row instead: an MMA's output row r depends
  // only on A's row r and its column c only on B's column c, so their sums are garbage no one stores,
  // and every load of the loop below is unconditional (no branches between the loads and the MMAs).
  const __nv_bfloat16* w_lo = w + int64_t(min(n0 + g, N - 1)) * K;
  const __nv_bfloat16* w_hi = w + int64_t(min(n0 + g + 8, N - 1)) * K;
  const __nv_bfloat16* x_row[kTiles];
  const __nv_bfloat16* up_row[kTiles];  // kSwiglu only
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    x_row[j] = x + int64_t(min(8 * j + g, M - 1)) * K;
    up_row[j] = kSwiglu ? up + int64_t(min(8 * j + g, M - 1)) * K : nullptr;
  }

  // W does not depend on the kernel ahead (dependent_launch.cuh): before the CTA waits for that kernel
  // (which x comes from), its ring's first stages are on their way to shared memory, or L2 has been asked
  // for its rows' first step of W.
  const WeightRing ring(dynamic_smem, kRows * row_tiles, K);
  if constexpr (kRing) {
    if (warp == 0) {
      if (lane == 0) ring.stages.init();
      __syncwarp();
      for (int j = 0; j < min(kRingStages, ring.count); ++j) ring.issue(j, w, cta * kRows * row_tiles, N, K, lane);
    }
    __syncthreads();  // the barriers' initialisation, before anyone waits on them
  } else if constexpr (kVector) {
    const int cta_rows = kRows * row_tiles, first_row = cta * cta_rows;
    const int64_t first_step = min(int64_t(K), int64_t(kUnroll) * k_splits * kChunk);
    const int r = int(threadIdx.x) % cta_rows, weight = kGated ? int(threadIdx.x) / cta_rows : member;
    if (int(threadIdx.x) < cta_rows * (kGated ? 2 : 1) && first_row + r < N)
      prefetch_to_l2(group.w[weight] + int64_t(first_row + r) * K, unsigned(first_step * 2));
  }
  wait_for_previous_grid();
  if constexpr (kStaged) {  // x is made here, into shared memory (after the ring, if any)
    const auto* staged = reinterpret_cast<__nv_bfloat16*>(dynamic_smem + (kRing ? ring.bytes() : 0));
    residual_step<kStep>(step, const_cast<__nv_bfloat16*>(staged), M, K);
    x_row[0] = staged + int64_t(min(g, M - 1)) * K;
  }
  // x's eight elements at k: from the staged rows, or through the read-only path.
  const auto load_x = [&](int j, int k) {
    if constexpr (kStaged) return *reinterpret_cast<const uint4*>(x_row[j] + k);
    if constexpr (kSwiglu) return swiglu_eight(load_cached(x_row[j] + k), load_cached(up_row[j] + k));
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
  int c = split;
  if constexpr (kRing) {
    // Stage j holds chunks j * chunks_per_stage ..., a multiple of k_splits of them: this split takes the
    // same chunks, in the same order, as below, and the products add the same values (zero past K, as
    // load_elements gives them), so the sums are the register path's bit for bit.
    const int chunks_per_stage = ring.stage_k / kChunk;
    const int tile_row = (tile % row_tiles) * kRows + g;
    for (int j = 0; j < ring.count; ++j) {
      ring.stages.wait_full(j);
      const __nv_bfloat16* stage = ring.stage(j);
#pragma unroll 2
      for (int cc = split; cc < chunks_per_stage; cc += k_splits) {
        const int k_stage = cc * kChunk + 8 * t, k = j * ring.stage_k + k_stage;
        if (k - 8 * t >= K) break;  // the stage's chunks end with K (warp-uniform)
        const bool in_k = k < K;
        const uint4 zero = make_uint4(0, 0, 0, 0);
        const uint4 wl = in_k ? ring.row_piece(stage, tile_row, k_stage) : zero;
        const uint4 wh = in_k ? ring.row_piece(stage, tile_row + 8, k_stage) : zero;
#pragma unroll
        for (int jt = 0; jt < kTiles; ++jt) mma_chunk(acc[jt], wl, wh, in_k ? load_x(jt, k) : zero);
      }
      ring.stages.release(j, lane);
      if (warp == 0 && j + kRingStages < ring.count)
        ring.issue(j + kRingStages, w, cta * kRows * row_tiles, N, K, lane);
    }
    c = full_chunks + k_splits;  // the register path below has nothing left
  }
  // Whole steps: kUnroll chunks, every load issued before the first product.
  for (; c + (kUnroll - 1) * k_splits < full_chunks; c += kUnroll * k_splits) {
    uint4 wl[kUnroll], wh[kUnroll], xv[kUnroll][kTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (c + u * k_splits) * kChunk + 8 * t;
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
  for (; c < full_chunks; c += k_splits) one_chunk(c);  // fewer than kUnroll left
  // The partial last chunk (element loads, zero past K), by the split whose turn it is: warp-uniform,
  // as the MMA needs the whole warp.
  if (!kStaged && !kRing && !kSwiglu && K % kChunk != 0 && split == full_chunks % k_splits) {
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
  for (int i = int(threadIdx.x); i < M * cta_rows; i += kCtaWarps * 32) {
    const int m = i / cta_rows, r = i % cta_rows;
    const int n = cta * cta_rows + r;
    if (n >= N) continue;
    if constexpr (kGated) {
      // Each product rounded as it would be stored, then gated as the SwiGLU kernel does.
      const float g = to_float(from_float<Out>(tile_sum(r / kRows, r, m)));
      const float u = to_float(from_float<Out>(tile_sum(row_tiles + r / kRows, r, m)));
      y[int64_t(m) * N + n] = from_float<Out>(g * sigmoid(g) * u);  // as kernels/swiglu/swiglu.cu computes it
    } else {
      y[int64_t(m) * N + n] = from_float<Out>(tile_sum(r / kRows, r, m));
    }
  }
}

template <int kTiles, bool kVector, typename Out, bool kGated = false, bool kRing = false>
__global__ void __launch_bounds__(cta_threads(kGated))
    skinny_matmul_kernel(const __nv_bfloat16* __restrict__ x, const __grid_constant__ SkinnyGroup<Out> group, int M,
                         int K) {
  skinny_matmul_body<kTiles, kVector, Out, kGated, Step::none, kRing>(x, group, M, K, ResidualStepArgs{});
}

// The product of SwiGLU's output, made from gate and up as x is read ("SwiGLU's input" above).
template <int kTiles, typename Out, bool kRing>
__global__ void __launch_bounds__(kThreads)
    skinny_matmul_swiglu_kernel(const __nv_bfloat16* __restrict__ gate, const __nv_bfloat16* __restrict__ up,
                                const __grid_constant__ SkinnyGroup<Out> group, int M, int K) {
  skinny_matmul_body<kTiles, true, Out, false, Step::none, kRing, true>(gate, group, M, K, ResidualStepArgs{}, up);
}

// The launch that begins with the residual step, held to the plain kernel's registers (64 a thread, four CTAs
// an SM) so that the step's rows kept through its barrier cost no occupancy in the stream over W; with the ring,
// whose shared memory leaves three CTAs an SM, to as many as three allow.
template <Step kStep, bool kRing = false>
__global__ void __launch_bounds__(kThreads, kRing ? 3 : 4)
    skinny_matmul_step_kernel(const __grid_constant__ SkinnyGroup<__nv_bfloat16> group, int M, int K,
                              const __grid_constant__ ResidualStepArgs step) {
  skinny_matmul_body<1, true, __nv_bfloat16, false, kStep, kRing>(step.x, group, M, K, step);
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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The most dynamic shared memory a ring launch takes: the widest CTA's ring and a step's staged rows.
constexpr int kRingMaxSmem =
    ring_bytes(kRows * kWarps) + int(kResidualStepMaxRows * kResidualStepMaxWidth) * int(sizeof(__nv_bfloat16));

// Lets a ring kernel take kRingMaxSmem, once per kernel and device (the attribute is the current device's).
template <typename... Params>
void allow_ring_smem(void (*kernel)(Params...), int device) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> allowed;
  const std::lock_guard lock(mutex);
  const std::pair<const void*, int> key{reinterpret_cast<const void*>(kernel), device};
  if (allowed.contains(key)) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingMaxSmem));
  allowed.insert(key);
}

// x W^T for each weight of ws, in one launch; gated: ws is (gate, up) and ys the one output of SwiGLU; with a
// step (kStep), x is the step's x, whose rows the step turns into the products' input.
// up: SwiGLU's up [M, K] where x is its gate and the products read SwiGLU's output (one weight, no step).
template <int kTiles, typename Out, Step kStep = Step::none>
void launch(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys, bool gated, cudaStream_t stream,
            const ResidualStepArgs& step = {}, const Tensor* up = nullptr) {
  const int M = int(x.dim(0)), K = int(x.dim(1));
  const int sm_count = device_properties(x.device().index).multiProcessorCount;
  const auto* xp = static_cast<const __nv_bfloat16*>(x.raw());
  SkinnyGroup<Out> group{};
  bool vector = aligned16(xp) && K % 8 == 0;
  int64_t ctas = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const int N = int(ws[i].dim(0)), row_tiles = pick_row_tiles(N, K, sm_count);
    group.w[i] = static_cast<const __nv_bfloat16*>(ws[i].raw());
    group.y[i] = static_cast<Out*>(ys[gated ? 0 : i].raw());
    group.n[i] = N;
    group.row_tiles[i] = row_tiles;
    group.first_cta[i] = int(ctas);
    vector = vector && aligned16(group.w[i]);
    if (!gated || i == 0) ctas += (int64_t(N) + kRows * row_tiles - 1) / (kRows * row_tiles);  // gated: up rides along
  }
  group.count = int(ws.size());
  group.first_cta[group.count] = int(ctas);
  // The ring: 16-byte rows, one weight a CTA, where it is chosen; its shared memory is the largest member's.
  const bool ring = vector && !gated && skinny_weight_ring_choice() == Toggle::on;
  int ring_smem = 0;
  for (int i = 0; i < group.count; ++i) ring_smem = std::max(ring_smem, ring_bytes(kRows * group.row_tiles[i]));
  const int staged_smem = kStep != Step::none ? M * K * int(sizeof(__nv_bfloat16)) : 0;
  const int smem = (ring ? ring_smem : 0) + staged_smem;
  const auto run = [&](auto kernel, int threads, auto... args) {
    if (ring) allow_ring_smem(kernel, x.device().index);
    launch_kernel(kernel, dim3(unsigned(ctas)), dim3(unsigned(threads)), smem, stream, args...);
  };
  if constexpr (kStep != Step::none)
    ring ? run(skinny_matmul_step_kernel<kStep, true>, kThreads, group, M, K, step)
         : run(skinny_matmul_step_kernel<kStep>, kThreads, group, M, K, step);
  else if (up) {  // swiglu_input_fits held: 16-byte rows, K a multiple of kChunk
    const auto* upp = static_cast<const __nv_bfloat16*>(up->raw());
    ring ? run(skinny_matmul_swiglu_kernel<kTiles, Out, true>, kThreads, xp, upp, group, M, K)
         : run(skinny_matmul_swiglu_kernel<kTiles, Out, false>, kThreads, xp, upp, group, M, K);
  } else if (gated)
    vector ? run(skinny_matmul_kernel<kTiles, true, Out, true>, cta_threads(true), xp, group, M, K)
           : run(skinny_matmul_kernel<kTiles, false, Out, true>, cta_threads(true), xp, group, M, K);
  else if (ring)
    run(skinny_matmul_kernel<kTiles, true, Out, false, true>, kThreads, xp, group, M, K);
  else
    vector ? run(skinny_matmul_kernel<kTiles, true, Out>, kThreads, xp, group, M, K)
           : run(skinny_matmul_kernel<kTiles, false, Out>, kThreads, xp, group, M, K);
}

// up: as launch's.
template <typename Out>
void launch_for_rows(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys, bool gated, cudaStream_t stream,
                     const Tensor* up) {
  switch ((x.dim(0) + 7) / 8) {
    case 1:
      return launch<1, Out>(x, ws, ys, gated, stream, {}, up);
    case 2:
      return launch<2, Out>(x, ws, ys, gated, stream, {}, up);
    case 3:
      return launch<3, Out>(x, ws, ys, gated, stream, {}, up);
    default:
      return launch<4, Out>(x, ws, ys, gated, stream, {}, up);
  }
}

void launch_for_dtype(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys, bool gated,
                      const Tensor* up = nullptr) {
  cudaStream_t stream = stream_for(x.device());
  if (ys[0].dtype() == DType::f32)
    launch_for_rows<float>(x, ws, ys, gated, stream, up);
  else
    launch_for_rows<__nv_bfloat16>(x, ws, ys, gated, stream, up);
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

}  // namespace

void skinny_matmul_grouped(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) {
  run_products(x, ws, ys);
}

void skinny_matmul(const Tensor& x, const Tensor& w, Tensor& y) { run_products(x, {&w, 1}, {&y, 1}); }

void skinny_matmul_after_residual_step(const ResidualStepInputs& step, std::span<const Tensor> ws, std::span<Tensor> ys,
                                       Tensor& h) {
  // residual_step_fits held (the front checked it): one row of at most kResidualStepMaxWidth, 16-byte rows, no
  // empty weight.
  const ResidualStepArgs args{
      static_cast<const __nv_bfloat16*>(step.residual.raw()), static_cast<const __nv_bfloat16*>(step.x.raw()),
      static_cast<const __nv_bfloat16*>(step.weight.raw()), static_cast<__nv_bfloat16*>(h.raw()), float(step.eps)};
  cudaStream_t stream = stream_for(step.x.device());
  if (step.kind == ResidualStep::post_norm)
    launch<1, __nv_bfloat16, Step::post_norm>(step.x, ws, ys, false, stream, args);
  else
    launch<1, __nv_bfloat16, Step::pre_norm>(step.x, ws, ys, false, stream, args);
}

void skinny_matmul_of_swiglu(const Tensor& gate, const Tensor& up, const Tensor& w, Tensor& y) {
  // swiglu_input_fits held (the front checked it): 16-byte rows, K a multiple of 32 and not empty.
  if (y.numel() == 0) return;
  const Tensor ws[1] = {w};
  launch_for_dtype(gate, ws, {&y, 1}, false, &up);
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
