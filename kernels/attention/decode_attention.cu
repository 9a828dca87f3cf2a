// Decode attention on CUDA: split-K flash decoding in bf16 with fp32 accumulation.
//
// Decode is bound by reading the cache (B * Hk * length * d * 2 bytes for K and as many for V), so:
//  - one block reads one chunk of one KV head's cache, once, for every query row that uses it (the G
//    heads of the group times the Tq new tokens: R = G * Tq rows, up to kMaxRows per block);
//  - the cache length is split into chunks so that even batch 1 has blocks for every SM; each block
//    keeps an online softmax (running max, sum, unnormalised numerator, fp32) over its chunk's tiles
//    and writes them as a partial;
//  - a second kernel merges a row's partials and its token's depth slots into one softmax (or the split kernel
//    itself: "Merge" below);
//  - with at most 4 rows per KV head the split kernel keeps keys in registers instead of tiles
//    (decode_split_rows_kernel), so short caches at large batch are not latency-bound.
// Tiles move global -> shared with 16-byte cp.async copies, double buffered. Every sum runs in a
// fixed order (no atomics in any sum): two runs give bit-identical outputs. Scores are kept in the log2 domain
// (q is prescaled by scale * log2 e) so the exponentials are exp2. run_decode_attention, the CUDA backend's
// entry point, picks this kernel, the fp32 attention kernel, or the CPU reference on a host copy.
//
// Prologue. decode_prologue_attention (decode_prologue.h) gives the few-rows split kernel the step's raw q,
// k and v instead of a prologue's output. Every block then does the part of the prologue it needs: it adds
// the q and k rows' sums of squares in the prologue kernel's order, normalises and rotates its own query
// heads, and the block whose split holds a sequence's new position normalises and rotates its KV head's new
// key and writes it and the new value into the cache, where its own threads read them after a barrier. No
// other block reads that position, so no block waits for another. Every load the prologue needs is issued
// before the first is used but the sums' parts, which load as they add (two vectors a thread at 1B); and
// every value is rounded as
// the prologue kernel rounds it (decode_prologue.cuh), so the output and the cache are the prologue's and
// attention's, bit for bit, one launch and one dependency a layer fewer.
//
// Next grid. The few-rows kernel lets the next grid (o_proj's GEMM, or the combine kernel) launch once its loop over
// the cache is done, not as soon as it has waited itself. Resident early, o_proj's CTAs asked L2 for their first
// step of W (at d 2048 their whole rows, 8 MB a launch) at attention's start, where the prologue's loads were
// slow (on an H100 the 1B's prologue took 4.4 us a block). Launched after the loop, the 1B's and the 190M's
// batch-1 steps took 1.2% and 1.1% less time at context 128, measured with every GEMM prefetching
// (bench/results/2026-12-07_attention_trigger_h100.md); the 1B's GEMMs no longer prefetch (skinny_matmul.h).
//
// Merge. Where merge_in_split_policy() says so (decode_attention.h) and there are no depth slots, the few-rows
// kernel merges the splits itself instead of the combine kernel: each block publishes its partial and counts itself on
// its row block's counter; the last of a row block's splits to arrive merges every split's partial (read through L2)
// with the combine kernel's own code (combine_row), so the output is the combine kernel's bit for bit, one launch and
// one dependency a layer fewer. That last block sets the counter back to zero. Where merges_in_cluster says so
// instead (at most 8 splits of one tile each, a split of at most as many blocks as SMs), a row block's splits run as
// one thread-block cluster (kernels/hopper/cluster.cuh): each stores its partial into split 0's shared memory, and
// after the cluster's barrier split 0 merges them with the same combine_row, reading them there: no atomic, no fence,
// no global round trip.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_fp32.h"
#include "kernels/attention/attention_mma.cuh"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_prologue.cuh"
#include "kernels/attention/decode_prologue.h"
#include "kernels/hopper/cluster.cuh"
#include "kernels/runtime/argument_checks.h"
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using flash::bf16_t;
using flash::cp_async_16;
using flash::smem_addr;

constexpr int kThreads = 128;
constexpr int kTileKeys = 64;  // cache positions per shared-memory tile
constexpr int kMaxRows = 32;   // query rows per block; more rows take more row blocks
constexpr int kScoreGroups = kThreads / kTileKeys;
constexpr int kScoreRows = kMaxRows / kScoreGroups;  // score rows per thread
constexpr int kScoreStride = kTileKeys + 1;          // odd: the row groups of the PV step read distinct banks
constexpr int kCombineWarps = 4;
constexpr int kMaxDevices = 64;
constexpr int kMaxClusterSplits = int(kMergeInClusterMaxSplits);
static_assert(kTileKeys == 64, "the row-statistics step gives each lane two keys of a tile");

// The prologue's inputs where the few-rows split kernel does its work ("Prologue" above); DecodeArgs::q is
// then the step's raw q [B, 1, Hq, d].
struct PrologueArgs {
  const bf16_t *k, *v;            // the step's raw k and v, [B, 1, Hk, d]
  const bf16_t *q_norm, *k_norm;  // QK-norm's weights [Hq d] and [Hk d], or null for none
  const float2* angles;           // rope_angles' [d/2] pairs, or [B, d/2] with per_row_angles
  bf16_t *cache_k, *cache_v;      // DecodeArgs::k and v, written at the new positions
  float q_eps, k_eps;
  bool per_row_angles;
};

struct DecodeArgs {
  const bf16_t *q, *k, *v, *dk, *dv;
  bf16_t* o;
  float* part_acc;  // [B, Hk, splits, R, d]: unnormalised numerators
  float2* part_ml;  // [B, Hk, splits, R]: running max (log2 domain) and sum of exponentials
  int B, Tq, Hq, Hk, G, R;
  int64_t capacity, length;
  int64_t chunk;  // cache positions per split, a multiple of kTileKeys
  int splits, row_blocks;
  int part_splits;  // the partials' room per (b, hk): the grid's splits (a row's own may be fewer)
  int S, slot_begin, slot_end;
  float scale_log2;  // scale * log2(e)
  // A decoding step captured as a CUDA graph: the positions held before the step, read at run time
  // (sequence b's length = past[b] + Tq, or past[0] + Tq for every b when past_rows is 1); then chunk
  // and splits follow from it on the device as plan_splits() would make them on the host, the grid
  // holding the most splits any length up to capacity takes (null: length, chunk and splits as given).
  const int32_t* past;
  int past_rows;          // past's entries: 1 (every sequence's count) or B
  int64_t want_splits;    // plan_splits' blocks-per-SM target, before clamping to the tiles
  PrologueArgs prologue;  // read by the few-rows kernel built with kPrologue only
  // Non-null: the few-rows kernel merges the splits itself ("Merge" above), counting a row block's splits on
  // counters[(b * Hk + hk) * row_blocks + row block] (grid_counters, runtime.h); no combine kernel runs.
  int* counters;
};

// Both kernels' view of sequence b's split plan (see plan_splits, which this mirrors for a device-held
// length). Sequences of different lengths have different plans; the partials' layout (part_splits)
// is the grid's, the same for all.
__device__ __forceinline__ void resolve_length(DecodeArgs& a, int b) {
  if (a.past == nullptr) return;
  // Never past the cache nor below the step's own positions (the host checks its counts; a bad one
  // must not make a plan of no tiles).
  a.length = max(int64_t(a.Tq), min(int64_t(a.past[a.past_rows > 1 ? b : 0]) + a.Tq, a.capacity));
  const int64_t tiles = (a.length + kTileKeys - 1) / kTileKeys;
  const int64_t want = max(int64_t(1), min(a.want_splits, tiles));
  const int64_t tiles_per_split = (tiles + want - 1) / want;
  a.chunk = tiles_per_split * kTileKeys;
  a.splits = int((tiles + tiles_per_split - 1) / tiles_per_split);
}

// Shared memory of the split kernel: K and V tiles (two buffers each, rows padded by 16 bytes so
// that 8 consecutive rows start in 8 distinct bank groups), the block's query rows in fp32, the
// tile's scores (then probabilities) and per-row statistics.
template <int D>
struct SplitSmem {
  static constexpr int kStride = D + 8;
  static constexpr size_t kTileBytes = size_t(kTileKeys) * kStride * sizeof(bf16_t);
  static constexpr size_t bytes() {
    return 4 * kTileBytes + (size_t(kMaxRows) * D + size_t(kMaxRows) * kScoreStride + 3 * kMaxRows) * sizeof(float);
  }
};

template <int D>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(DecodeArgs args) {
  follow_previous_grid();  // dependent_launch.cuh
  DecodeArgs a = args;
  resolve_length(a, int(blockIdx.z) / a.row_blocks);
  if (int(blockIdx.x) >= a.splits) return;  // a split this length does not have (the whole block leaves)
  constexpr int kStride = SplitSmem<D>::kStride;
  constexpr int kChunks = D / 8;                 // 16-byte chunks per row
  constexpr int kPvGroups = kThreads / kChunks;  // PV step: thread groups, one chunk per thread
  constexpr int kPvRows = kMaxRows / kPvGroups;  // rows per thread in the PV step
  extern __shared__ __align__(16) unsigned char smem[];
  bf16_t* ks = reinterpret_cast<bf16_t*>(smem);
  bf16_t* vs = ks + 2 * kTileKeys * kStride;
  float* qs = reinterpret_cast<float*>(vs + 2 * kTileKeys * kStride);
  float* ss = qs + kMaxRows * D;
  float* row_m = ss + kMaxRows * kScoreStride;
  float* row_l = row_m + kMaxRows;
  float* row_alpha = row_l + kMaxRows;

  const int tid = threadIdx.x, split = blockIdx.x, hk = blockIdx.y;
  const int b = blockIdx.z / a.row_blocks, r0 = (blockIdx.z % a.row_blocks) * kMaxRows;
  const int rows = min(kMaxRows, a.R - r0);
  // Row r of the block is query row r0 + r of the KV head: token (r0 + r) / G, head hk * G + (r0 + r) % G.
  // Positions past the last row's own are visible to no row of the block.
  const int64_t last_visible = a.length - a.Tq + (r0 + rows - 1) / a.G;
  const int64_t key0 = int64_t(split) * a.chunk, key1 = min(min(a.length, key0 + a.chunk), last_visible + 1);
  const int tiles = key0 < key1 ? int((key1 - key0 + kTileKeys - 1) / kTileKeys) : 0;
  const int64_t head = (int64_t(b) * a.Hk + hk) * a.capacity;

  auto load_tile = [&](int t, int buf) {
    const int64_t t0 = key0 + int64_t(t) * kTileKeys;
    const int n = int(min(int64_t(kTileKeys), key1 - t0));
    const bf16_t* k_src = a.k + (head + t0) * D;
    const bf16_t* v_src = a.v + (head + t0) * D;
    for (int idx = tid; idx < n * kChunks; idx += kThreads) {
      const int j = idx / kChunks, c = idx % kChunks;
      const int at = (buf * kTileKeys + j) * kStride + c * 8;
      cp_async_16(smem_addr(ks + at), k_src + int64_t(j) * D + c * 8, true);
      cp_async_16(smem_addr(vs + at), v_src + int64_t(j) * D + c * 8, true);
    }
    flash::cp_async_commit();
  };
  if (tiles > 0) load_tile(0, 0);

  for (int idx = tid; idx < rows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks, qr = r0 + r;
    const int64_t h = int64_t(hk) * a.G + qr % a.G;
    const Pack<bf16_t, 8> p = load_pack<8>(a.q + ((int64_t(b) * a.Tq + qr / a.G) * a.Hq + h) * D + c * 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) qs[r * D + c * 8 + e] = to_float(p.v[e]) * a.scale_log2;
  }
  if (tid < kMaxRows) row_m[tid] = -INFINITY, row_l[tid] = 0.f;

  // PV step layout: thread = (16-byte chunk c of d, group). Groups split the rows (rg, nrg groups,
  // each with up to kPvRows rows) and, when rows are few, the tile's keys (kg, nkg groups: key j goes
  // to group j % nkg); the key groups' sums are added at the end.
  const int c_pv = tid % kChunks, group = tid / kChunks;
  int nrg = 1;
  while (nrg * kPvRows < rows) nrg *= 2;
  const int nkg = kPvGroups / nrg, rg = group % nrg, kg = group / nrg;
  float acc[kPvRows][8] = {};

  for (int t = 0; t < tiles; ++t) {
    const int buf = t & 1;
    const int64_t t0 = key0 + int64_t(t) * kTileKeys;
    const int n = int(min(int64_t(kTileKeys), key1 - t0));
    if (t + 1 < tiles) {
      load_tile(t + 1, buf ^ 1);  // that buffer's last reader passed the barrier ending step t - 1
      flash::cp_async_wait<1>();
    } else {
      flash::cp_async_wait<0>();
    }
    __syncthreads();

    // Scores: thread = (key j, score group); every row of the group against the key, so each K
    // element is converted once per thread.
    {
      const int j = tid % kTileKeys, sg = tid / kTileKeys;
      float s[kScoreRows] = {};
      if (j < n && sg < rows) {
        const bf16_t* krow = ks + (buf * kTileKeys + j) * kStride;
#pragma unroll 4
        for (int c = 0; c < kChunks; ++c) {
          const Pack<bf16_t, 8> kp = load_pack<8>(krow + c * 8);
          float kf[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) kf[e] = to_float(kp.v[e]);
#pragma unroll
          for (int i = 0; i < kScoreRows; ++i) {
            const int r = sg + i * kScoreGroups;
            if (r < rows) {
              const float4 qa = *reinterpret_cast<const float4*>(qs + r * D + c * 8);
              const float4 qb = *reinterpret_cast<const float4*>(qs + r * D + c * 8 + 4);
              s[i] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] +
                      qb.z * kf[6] + qb.w * kf[7];
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kScoreRows; ++i) {
        const int r = sg + i * kScoreGroups;
        if (r < rows) {
          const bool visible = j < n && t0 + j <= a.length - a.Tq + (r0 + r) / a.G;
          ss[r * kScoreStride + j] = visible ? s[i] : -INFINITY;
        }
      }
    }
    __syncthreads();

    // Online softmax statistics, one warp per row; a row with nothing visible yet keeps max -inf and
    // takes 0 as its reference, so no -inf - -inf appears.
    {
      const int warp = tid / 32, lane = tid % 32;
      for (int r = warp; r < rows; r += kThreads / 32) {
        float* srow = ss + r * kScoreStride;
        const float x0 = srow[lane], x1 = srow[lane + 32];
        const float m_old = row_m[r];
        const float m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1)));
        const float ref = m_new == -INFINITY ? 0.f : m_new;
        const float p0 = exp2f(x0 - ref), p1 = exp2f(x1 - ref);
        srow[lane] = p0;
        srow[lane + 32] = p1;
        const float sum = warp_sum(p0 + p1);
        if (lane == 0) {
          const float alpha = exp2f(m_old - ref);
          row_alpha[r] = alpha;
          row_l[r] = row_l[r] * alpha + sum;
          row_m[r] = m_new;
        }
      }
    }
    __syncthreads();

    // Numerators: acc[row] = acc[row] * alpha + sum_j p[row][j] v_j over this thread's keys.
    {
#pragma unroll
      for (int i = 0; i < kPvRows; ++i) {
        const int r = rg + i * nrg;
        if (r < rows) {
          const float alpha = row_alpha[r];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[i][e] *= alpha;
        }
      }
      const bf16_t* vt = vs + buf * kTileKeys * kStride + c_pv * 8;
#pragma unroll 4
      for (int j = kg; j < n; j += nkg) {
        const Pack<bf16_t, 8> vp = load_pack<8>(vt + j * kStride);
        float vf[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) vf[e] = to_float(vp.v[e]);
#pragma unroll
        for (int i = 0; i < kPvRows; ++i) {
          const int r = rg + i * nrg;
          if (r < rows) {
            const float p = ss[r * kScoreStride + j];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[i][e] += p * vf[e];
          }
        }
      }
    }
    __syncthreads();
  }

  // Key groups 1.. hand their sums to group 0 through the (now idle) K tiles, added in group order.
  if (nkg > 1) {
    float* red = reinterpret_cast<float*>(smem);  // [kPvGroups][kPvRows][D]
    static_assert(size_t(kPvGroups) * kPvRows * D * sizeof(float) <= 2 * SplitSmem<D>::kTileBytes);
    if (kg > 0)
#pragma unroll
      for (int i = 0; i < kPvRows; ++i)
#pragma unroll
        for (int e = 0; e < 8; ++e) red[(group * kPvRows + i) * D + c_pv * 8 + e] = acc[i][e];
    __syncthreads();
    if (kg == 0)
      for (int g = 1; g < nkg; ++g)
#pragma unroll
        for (int i = 0; i < kPvRows; ++i)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[i][e] += red[((rg + g * nrg) * kPvRows + i) * D + c_pv * 8 + e];
  }

  const int64_t part0 = ((int64_t(b) * a.Hk + hk) * a.part_splits + split) * a.R + r0;
  if (kg == 0)
#pragma unroll
    for (int i = 0; i < kPvRows; ++i) {
      const int r = rg + i * nrg;
      if (r < rows) {
        float4* dst = reinterpret_cast<float4*>(a.part_acc + (part0 + r) * D + c_pv * 8);
        dst[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        dst[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
      }
    }
  if (tid < rows) a.part_ml[part0 + tid] = make_float2(row_m[tid], row_l[tid]);
}

// N floats of a partial at p: through L2 from global memory (written by other blocks, perhaps on other SMs, in this
// grid), or an ordinary load from the merging block's shared memory (kGlobal false).
template <int N, bool kGlobal>
__device__ __forceinline__ Pack<float, N> load_partial(const float* p) {
  static_assert(N == 2 || N == 4, "a lane's dims of a 64- or 128-wide head");
  using Vector = std::conditional_t<N == 2, float2, float4>;
  const auto* v = reinterpret_cast<const Vector*>(p);
  Vector x;
  if constexpr (kGlobal)
    x = __ldcg(v);
  else
    x = *v;
  Pack<float, N> out;
  out.v[0] = x.x, out.v[1] = x.y;
  if constexpr (N == 4) out.v[2] = x.z, out.v[3] = x.w;
  return out;
}

// Where output row `row` = (b * Tq + i) * Hq + h sits: its batch row b, new token i and query head h.
struct OutputRow {
  int64_t bi;  // b * Tq + i
  int b, i, h;
  __device__ OutputRow(const DecodeArgs& a, int64_t row)
      : bi(row / a.Hq), b(int(bi / a.Tq)), i(int(bi % a.Tq)), h(int(row % a.Hq)) {}
};

// Where combine_row finds a row's partials: in global memory, written by the grid's blocks (the combine kernel
// and the counter's merge), or in the merging block's shared memory, written there by its cluster (ClusterPartials).
// stats(s): split s's (running max, sum of exponentials); numerator<N>(s, dim0): its N numerators from dim0.
template <int D>
struct GlobalPartials {
  const DecodeArgs& a;
  int64_t part0;  // the row's partial of split 0; split s's is R further on for each s
  __device__ GlobalPartials(const DecodeArgs& args, int64_t row) : a(args) {
    const OutputRow o(a, row);
    part0 = (int64_t(o.b) * a.Hk + o.h / a.G) * a.part_splits * int64_t(a.R) + o.i * a.G + o.h % a.G;
  }
  __device__ float2 stats(int s) const { return __ldcg(&a.part_ml[part0 + int64_t(s) * a.R]); }
  template <int N>
  __device__ Pack<float, N> numerator(int s, int dim0) const {
    return load_partial<N, true>(a.part_acc + (part0 + int64_t(s) * a.R) * D + dim0);
  }
};

// Row r of a few-rows block's partials in the shared memory of its cluster's split 0: [split][row][d] and
// [split][row].
template <int D, int NR>
struct ClusterPartials {
  const float (*acc)[NR][D];
  const float2 (*ml)[NR];
  int r;
  __device__ float2 stats(int s) const { return ml[s][r]; }
  template <int N>
  __device__ Pack<float, N> numerator(int s, int dim0) const {
    return load_partial<N, false>(&acc[s][r][dim0]);
  }
};

// Output row `row` = (b * Tq + i) * Hq + h by one warp, a resolved for b: merges the row's partials over the
// splits and its token's depth slots into one softmax. Lane l owns dims [l * D / 32, (l + 1) * D / 32).
template <int D, typename Partials>
__device__ __forceinline__ void combine_row(const DecodeArgs& a, int64_t row, int lane, const Partials& partials) {
  constexpr int kPer = D / 32;
  const OutputRow o(a, row);
  const int hk = o.h / a.G;
  const int dim0 = lane * kPer;

  float qv[kPer] = {};
  if (a.slot_end > a.slot_begin) {  // q only scores depth slots (and is raw where the split kernel did the prologue)
    const Pack<bf16_t, kPer> p = load_pack<kPer>(a.q + row * D + dim0);
#pragma unroll
    for (int e = 0; e < kPer; ++e) qv[e] = to_float(p.v[e]);
  }
  auto depth_row = [&](const bf16_t* base, int s) { return base + ((o.bi * a.S + s) * a.Hk + hk) * D + dim0; };
  auto depth_score = [&](int s) {
    const Pack<bf16_t, kPer> kp = load_pack<kPer>(depth_row(a.dk, s));
    float part = 0.f;
#pragma unroll
    for (int e = 0; e < kPer; ++e) part += qv[e] * to_float(kp.v[e]);
    return warp_sum(part) * a.scale_log2;
  };

  // Every query sees cache position 0, so some split has a finite max and so does M.
  float M = -INFINITY;
  for (int s = lane; s < a.splits; s += 32) M = fmaxf(M, partials.stats(s).x);
  M = warp_max(M);
  for (int s = a.slot_begin; s < a.slot_end; ++s) M = fmaxf(M, depth_score(s));

  float den = 0.f, num[kPer] = {};
  for (int s = 0; s < a.splits; ++s) {
    const float2 ml = partials.stats(s);
    const float w = exp2f(ml.x - M);  // 0 for a split that saw nothing (max -inf)
    den += w * ml.y;
    const Pack<float, kPer> acc = partials.template numerator<kPer>(s, dim0);
#pragma unroll
    for (int e = 0; e < kPer; ++e) num[e] += w * acc.v[e];
  }
  for (int s = a.slot_begin; s < a.slot_end; ++s) {
    const float w = exp2f(depth_score(s) - M);
    den += w;
    const Pack<bf16_t, kPer> vp = load_pack<kPer>(depth_row(a.dv, s));
#pragma unroll
    for (int e = 0; e < kPer; ++e) num[e] += w * to_float(vp.v[e]);
  }
  Pack<bf16_t, kPer> out;
#pragma unroll
  for (int e = 0; e < kPer; ++e) out.v[e] = from_float<bf16_t>(num[e] / den);
  store_pack<kPer>(a.o + row * D + dim0, out);
}

// The split kernel for few query rows per KV head (R <= 4: decoding one token with G <= 4, as MHA and
// narrow GQA models do). The tile kernel above stages 64-key tiles through shared memory for up to 32
// rows; with one row most of its threads idle and its 94 KB of shared memory keep two blocks per SM,
// so a batch of short caches is latency-bound. Here every lane group of D / 8 lanes owns one key at a
// time (16 bytes of its K and V row per lane, read straight into registers, U keys in flight per
// lane) and keeps its own online softmax per row; the groups are merged by shuffles within a warp and
// through shared memory across warps, in a fixed order. Same grid, partials and split plan as the tile
// kernel, so the combine kernel serves both. With kPrologue it also does the prologue's work ("Prologue"
// above): one new token per sequence (Tq = 1), a device-held count, 16-byte aligned rows.
// Blocks per SM the few-rows kernel keeps with NR rows (what its registers allowed before the prologue variant:
// ptxas gave it 108, 127 and 164 a thread at NR 1, 2 and 4): the variant, whose loop over the cache is the same,
// is held to as many.
constexpr int rows_kernel_blocks(int rows) { return rows <= 2 ? 4 : 3; }

// kMerge: who merges the splits ("Merge" above), each a kernel of its own so that the path with the combine kernel
// keeps its registers.
template <int D, int NR, bool kPrologue = false, DecodeMerge kMerge = DecodeMerge::combine_kernel>
__global__ void __launch_bounds__(kThreads, rows_kernel_blocks(NR)) decode_split_rows_kernel(DecodeArgs args) {
  constexpr bool kCluster = kMerge == DecodeMerge::cluster;
  if constexpr (kCluster) cluster_arrive_relaxed();  // this block has started (cluster.cuh)
  wait_for_previous_grid();  // dependent_launch.cuh; the next grid launches after the loop ("Next grid" above)
  DecodeArgs a = args;
  resolve_length(a, int(blockIdx.z) / a.row_blocks);
  if (int(blockIdx.x) >= a.splits) return;
  constexpr int kLanesPerKey = D / 8;  // 16-byte chunks per row
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kWarps = kThreads / 32;
  constexpr int kSlots = kWarps * kKeysPerWarp;  // keys the block reads side by side
  constexpr int kInFlight = 4;                   // keys per lane group per step
  __shared__ float red_acc[kWarps][NR][D];
  __shared__ float2 red_ml[kWarps][NR];
  static_assert(!kPrologue || 2 * kThreads == prologue::kParts, "each thread adds two parts of the prologue's sums");
  __shared__ float2 norm_sums[prologue::kPartWarps];
  // The cluster's partials, in the shared memory of its split 0, which merges them.
  __shared__ __align__(16) float slot_acc[kCluster ? kMaxClusterSplits : 1][NR][D];
  __shared__ float2 slot_ml[kCluster ? kMaxClusterSplits : 1][NR];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int slot = warp * kKeysPerWarp + lane / kLanesPerKey, c = lane % kLanesPerKey;
  const int split = blockIdx.x, hk = blockIdx.y, b = blockIdx.z / a.row_blocks;
  const int r0 = (blockIdx.z % a.row_blocks) * kMaxRows, rows = min(NR, a.R - r0);
  const int64_t last_visible = a.length - a.Tq + (r0 + rows - 1) / a.G;
  const int64_t key0 = int64_t(split) * a.chunk, key1 = min(min(a.length, key0 + a.chunk), last_visible + 1);
  const int64_t head = (int64_t(b) * a.Hk + hk) * a.capacity;
  const bf16_t* k_base = a.k + head * D + c * 8;
  const bf16_t* v_base = a.v + head * D + c * 8;

  float q[NR][8], acc[NR][8], m[NR], l[NR];
  int64_t visible_to[NR];  // the last cache position row r sees
  if constexpr (kPrologue) {
    const PrologueArgs& p = a.prologue;
    const int nq = a.Hq * D, nk = a.Hk * D;
    const bf16_t* q_row = a.q + int64_t(b) * nq;
    const bf16_t* k_row = p.k + int64_t(b) * nk;
    const float2* angles = p.angles + (p.per_row_angles ? int64_t(b) * (D / 2) : 0);
    // The block whose split holds the new position (the last) writes the KV head's new key and value.
    const int64_t position = a.past[a.past_rows > 1 ? b : 0];
    const bool writes = position >= key0 && position < key0 + a.chunk && position < a.capacity;
    // 1. The prologue's loads go out before the first use (the sums' parts load as they add): this block's query heads
    // (this lane's chunk c), the writer's key chunk and value chunk, then the rows' sums of squares.
    prologue::Rotation<bf16_t> q_in[NR], k_in;
#pragma unroll
    for (int r = 0; r < NR; ++r)
      q_in[r].load(q_row, p.q_norm, angles, int64_t(hk) * a.G + (r0 + min(r, rows - 1)) % a.G, D, c);
    const int kv_chunk = tid % (D / 8);
    const bool writes_key = writes && tid < D / 8, writes_value = writes && tid >= D / 8 && tid < D / 4;
    if (writes_key) k_in.load(k_row, p.k_norm, angles, hk, D, kv_chunk);
    Pack<bf16_t, 8> value{};
    if (writes_value) value = load_pack<8>(p.v + int64_t(b) * nk + int64_t(hk) * D + kv_chunk * 8);
    float rstd_q = 1.f, rstd_k = 1.f;
    if (p.q_norm) {  // parts tid and tid + kThreads: warps `warp` and `warp + kWarps` of the prologue's
      float2 first = prologue::part_sums<bf16_t, 8>(q_row, k_row, nq / 8, nk / 8, tid);
      float2 second = prologue::part_sums<bf16_t, 8>(q_row, k_row, nq / 8, nk / 8, tid + kThreads);
      first = make_float2(warp_sum(first.x), warp_sum(first.y));
      second = make_float2(warp_sum(second.x), warp_sum(second.y));
      if (lane == 0) norm_sums[warp] = first, norm_sums[warp + kWarps] = second;
      __syncthreads();
      const float2 ss = prologue::sum_parts(norm_sums);
      rstd_q = prologue::rstd(true, ss.x, nq, p.q_eps);
      rstd_k = prologue::rstd(true, ss.y, nk, p.k_eps);
    }
    // 2. The rotations, and the writer's stores. The block reads its own writes back from the cache below,
    // ordered by the barrier; no other block reads that position.
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const Pack<bf16_t, 8> qp = q_in[r].rotate(rstd_q);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[r][e] = to_float(qp.v[e]) * a.scale_log2;
    }
    if (writes) {
      const int64_t at = (head + position) * D + kv_chunk * 8;
      if (writes_key) store_pack<8>(p.cache_k + at, k_in.rotate(rstd_k));
      if (writes_value) store_pack<8>(p.cache_v + at, value);
      __syncthreads();
    }
  } else {
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const int qr = r0 + min(r, rows - 1);
      const int64_t h = int64_t(hk) * a.G + qr % a.G;
      const Pack<bf16_t, 8> p = load_pack<8>(a.q + ((int64_t(b) * a.Tq + qr / a.G) * a.Hq + h) * D + c * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[r][e] = to_float(p.v[e]) * a.scale_log2;
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    const int qr = r0 + min(r, rows - 1);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
    m[r] = -INFINITY, l[r] = 0.f;
    visible_to[r] = r < rows ? a.length - a.Tq + qr / a.G : -1;  // a padding row sees nothing
  }

  // Every lane runs the same steps (the shuffles need the whole warp); keys past key1 are masked.
  for (int64_t base = key0; base < key1; base += int64_t(kInFlight) * kSlots) {
    Pack<bf16_t, 8> kp[kInFlight], vp[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t t = base + int64_t(u) * kSlots + slot;
      if (t < key1) {
        kp[u] = load_pack<8>(k_base + t * D);
        vp[u] = load_pack<8>(v_base + t * D);
      }
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      float s[kInFlight];
      float s_max = -INFINITY;
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t t = base + int64_t(u) * kSlots + slot;
        float dot = 0.f;
        if (t < key1)
#pragma unroll
          for (int e = 0; e < 8; ++e) dot += q[r][e] * to_float(kp[u].v[e]);
#pragma unroll
        for (int offset = kLanesPerKey / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        s[u] = t < key1 && t <= visible_to[r] ? dot : -INFINITY;
        s_max = fmaxf(s_max, s[u]);
      }
      const float m_new = fmaxf(m[r], s_max);
      if (m_new == -INFINITY) continue;  // nothing visible to this row in its keys yet
      const float alpha = exp2f(m[r] - m_new);
      l[r] *= alpha;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] *= alpha;
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        if (s[u] == -INFINITY) continue;
        const float p = exp2f(s[u] - m_new);
        l[r] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] += p * to_float(vp[u].v[e]);
      }
      m[r] = m_new;
    }
  }

  allow_dependent_grids();  // every load of the cache is done ("Next grid" above)
  // Two softmax partials (m, l, acc) of the same row as one.
  auto merge = [](float& m, float& l, float* acc, float m2, float l2, const float* acc2) {
    const float top = fmaxf(m, m2), ref = top == -INFINITY ? 0.f : top;
    const float w1 = exp2f(m - ref), w2 = exp2f(m2 - ref);
    l = l * w1 + l2 * w2;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = acc[e] * w1 + acc2[e] * w2;
    m = top;
  };
  // The warp's lane groups, by butterfly: afterwards every group holds the warp's sums.
#pragma unroll
  for (int offset = kLanesPerKey; offset < 32; offset <<= 1)
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      float other[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) other[e] = __shfl_xor_sync(0xffffffffu, acc[r][e], offset);
      const float m2 = __shfl_xor_sync(0xffffffffu, m[r], offset), l2 = __shfl_xor_sync(0xffffffffu, l[r], offset);
      merge(m[r], l[r], acc[r], m2, l2, other);
    }
  // The warps, through shared memory, in warp order.
  if (lane < kLanesPerKey)
#pragma unroll
    for (int r = 0; r < NR; ++r) {
#pragma unroll
      for (int e = 0; e < 8; ++e) red_acc[warp][r][c * 8 + e] = acc[r][e];
      if (lane == 0) red_ml[warp][r] = make_float2(m[r], l[r]);
    }
  __syncthreads();
  if constexpr (kCluster) cluster_wait_acquire();  // every block of the cluster has started
  if (warp == 0 && lane < kLanesPerKey) {
    const int64_t part0 = ((int64_t(b) * a.Hk + hk) * a.part_splits + split) * a.R + r0;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      if (r >= rows) break;
      for (int w = 1; w < kWarps; ++w) merge(m[r], l[r], acc[r], red_ml[w][r].x, red_ml[w][r].y, &red_acc[w][r][c * 8]);
      float4* dst = kCluster ? reinterpret_cast<float4*>(cluster_peer(&slot_acc[split][r][c * 8], 0))
                             : reinterpret_cast<float4*>(a.part_acc + (part0 + r) * D + c * 8);
      dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
      if (lane == 0)
        *(kCluster ? cluster_peer(&slot_ml[split][r], 0) : &a.part_ml[part0 + r]) = make_float2(m[r], l[r]);
    }
    if constexpr (kMerge == DecodeMerge::counter)
      __threadfence();  // the partial, published before this block is counted
  }
  if constexpr (kMerge == DecodeMerge::combine_kernel) return;
  // The output row this warp merges, where warp < rows (one warp a row).
  const int qr = r0 + warp;
  const int64_t out_row = (int64_t(b) * a.Tq + qr / a.G) * a.Hq + int64_t(hk) * a.G + qr % a.G;
  if constexpr (kCluster) {
    // Split 0 merges the cluster's partials once every block has stored its own, one warp a row.
    cluster_arrive_release();
    cluster_wait_acquire();
    if (split != 0 || warp >= rows) return;
    combine_row<D>(a, out_row, lane, ClusterPartials<D, NR>{slot_acc, slot_ml, warp});
    return;
  }
  // "Merge" above: the last of the row block's splits to be counted merges them all, one warp a row.
  __shared__ bool last;
  int* counter = a.counters + (int64_t(b) * a.Hk + hk) * a.row_blocks + int(blockIdx.z) % a.row_blocks;
  __syncthreads();
  if (tid == 0) last = atomicAdd(counter, 1) == a.splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (warp < rows) combine_row<D>(a, out_row, lane, GlobalPartials<D>(a, out_row));
  if (tid == 0) *counter = 0;
}

// One warp per output row (b, i, h), for the split kernels that leave the merge to a kernel of its own.
template <int D>
__global__ void __launch_bounds__(kCombineWarps * 32) decode_combine_kernel(DecodeArgs args) {
  follow_previous_grid();  // dependent_launch.cuh
  DecodeArgs a = args;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kCombineWarps + warp;  // ((b * Tq + i) * Hq + h)
  if (row >= int64_t(a.B) * a.Tq * a.Hq) return;                   // whole warps leave together
  resolve_length(a, int(row / a.Hq / a.Tq));
  combine_row<D>(a, row, lane, GlobalPartials<D>(a, row));
}

// How the cache is split: about kWaves blocks per SM (two to four are resident at once) and at least
// one tile per split.
struct SplitPlan {
  int splits, row_blocks;
  int64_t chunk;
  int64_t want;  // splits wanted before clamping to the tiles (wanted_splits)
};
constexpr int kWaves = 4;

// Splits wanted before clamping to the tiles: enough blocks for kWaves per SM.
int64_t wanted_splits(int64_t B, int64_t Hk, int row_blocks, int sm_count) {
  const int64_t blocks_per_split = B * Hk * row_blocks;
  return (int64_t(kWaves) * sm_count + blocks_per_split - 1) / blocks_per_split;
}

SplitPlan plan_splits(int64_t B, int64_t Hk, int64_t R, int64_t length, int sm_count) {
  SplitPlan p{};
  p.row_blocks = int((R + kMaxRows - 1) / kMaxRows);
  const int64_t tiles = (length + kTileKeys - 1) / kTileKeys;
  p.want = wanted_splits(B, Hk, p.row_blocks, sm_count);
  const int64_t want = std::clamp<int64_t>(p.want, 1, tiles);
  const int64_t tiles_per_split = (tiles + want - 1) / want;
  p.chunk = tiles_per_split * kTileKeys;
  p.splits = int((tiles + tiles_per_split - 1) / tiles_per_split);
  return p;
}

// The launch's plan: plan_splits' for a length given on the host; with a device-held one (`length` is then the
// capacity), room for the most splits any length up to the capacity takes: a plan never has more than
// min(wanted, tiles) (the capacity's own plan may have fewer: 5 tiles in 3).
SplitPlan launch_plan(int64_t B, int64_t Hk, int64_t R, int64_t length, bool device_held, int sm_count) {
  SplitPlan plan = plan_splits(B, Hk, R, length, sm_count);
  if (device_held) plan.splits = int(std::clamp<int64_t>(plan.want, 1, (length + kTileKeys - 1) / kTileKeys));
  return plan;
}

// Who merges the splits of a launch with this plan (decode_attention.h's rules; clusters where the device and the
// build have them).
DecodeMerge plan_merge(const SplitPlan& plan, int64_t B, int64_t Hk, int64_t R, bool has_depth, Device device,
                       int sm_count) {
  const int64_t split_blocks = B * Hk * plan.row_blocks;
  if (merges_in_cluster(R, has_depth, plan.splits, plan.chunk / kTileKeys, split_blocks, sm_count) &&
      supports_sm90_launches(device.index))
    return DecodeMerge::cluster;
  if (merges_in_split(R, has_depth, plan.splits) && split_blocks <= kGridCounters) return DecodeMerge::counter;
  return DecodeMerge::combine_kernel;
}

constexpr const char* kOp = "decode_attention (cuda)";

void check_tensor(const char* name, const Tensor& t, Device device) {
  check_device_tensor(kOp, name, t, DType::bf16, device, "the CUDA kernel reads bf16 and accumulates in fp32");
  check_pointer(kOp, name, t.raw(), 16);
}

// past: null, or the device-held count of positions before the step (then `length` is the capacity,
// which sizes the grid and the partials for the longest cache). prologue: null, or the prologue's inputs
// for the few-rows kernel (q is then raw; the caller has checked that kernel runs: R <= 4, past given).
Tensor run_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length, const Tensor* past,
                  const DepthSlots& depth, double scale, const PrologueArgs* prologue = nullptr) {
  const Device device = q.device();
  check_tensor("q", q, device);
  check_tensor("k_cache", k_cache, device);
  check_tensor("v_cache", v_cache, device);
  const bool has_depth = depth.end > depth.begin;
  if (has_depth) {
    check_tensor("depth.k", depth.k, device);
    check_tensor("depth.v", depth.v, device);
  }
  const int64_t B = q.dim(0), Tq = q.dim(1), Hq = q.dim(2), d = q.dim(3), Hk = k_cache.dim(1);
  FATHOM_CHECK(d == 64 || d == 128, kOp, ": head dim d = ", d, " of q ", describe(q),
               " is not supported (the kernel is built for 64 and 128)");
  const int64_t G = Hq / Hk, R = G * Tq;
  const int sm_count = device_properties(device.index).multiProcessorCount;
  const SplitPlan plan = launch_plan(B, Hk, R, length, past != nullptr, sm_count);
  FATHOM_CHECK(Hk <= 65535 && B * plan.row_blocks <= 65535 && B * Tq * Hq < (int64_t(1) << 31), kOp, ": q ",
               describe(q), " with k_cache ", describe(k_cache), " exceeds the kernel's grid");

  // Up to 4 rows a KV head take the few-rows kernel, which may merge its own splits.
  const bool rows_kernel = R <= kDecodeRowsKernelMaxRows;
  const DecodeMerge merge = plan_merge(plan, B, Hk, R, has_depth, device, sm_count);
  Tensor o = Tensor::empty(q.shape(), DType::bf16, device);
  // The partials in global memory, unless a cluster keeps them in shared memory.
  const int64_t part_rows = merge == DecodeMerge::cluster ? 0 : B * Hk * plan.splits * R;
  Tensor part_acc = Tensor::empty({part_rows * d}, DType::f32, device);
  Tensor part_ml = Tensor::empty({part_rows * 2}, DType::f32, device);

  DecodeArgs a{};
  a.q = flash::dev(q.data<bf16>());
  a.k = flash::dev(k_cache.data<bf16>());
  a.v = flash::dev(v_cache.data<bf16>());
  a.dk = has_depth ? flash::dev(depth.k.data<bf16>()) : nullptr;
  a.dv = has_depth ? flash::dev(depth.v.data<bf16>()) : nullptr;
  a.o = flash::dev(o.data<bf16>());
  a.part_acc = part_acc.data<float>();
  a.part_ml = reinterpret_cast<float2*>(part_ml.data<float>());
  a.B = int(B), a.Tq = int(Tq), a.Hq = int(Hq), a.Hk = int(Hk), a.G = int(G), a.R = int(R);
  a.capacity = k_cache.dim(2), a.length = length, a.chunk = plan.chunk;
  a.splits = plan.splits, a.row_blocks = plan.row_blocks, a.part_splits = plan.splits;
  a.S = has_depth ? int(depth.k.dim(2)) : 0;
  a.slot_begin = has_depth ? int(depth.begin) : 0;
  a.slot_end = has_depth ? int(depth.end) : 0;
  a.scale_log2 = float(scale * double(flash::kLog2e));
  a.past = past ? past->data<int32_t>() : nullptr;
  a.past_rows = past ? int(past->numel()) : 1;
  a.want_splits = plan.want;
  if (prologue) a.prologue = *prologue;
  a.counters = merge == DecodeMerge::counter ? grid_counters(device.index) : nullptr;

  cudaStream_t stream = stream_for(device);
  auto launch = [&]<int D>() {
    const int smem = int(SplitSmem<D>::bytes());
    // Once per head dim and device (the attribute is the current device's).
    static bool attribute_set[kMaxDevices] = {};
    FATHOM_CHECK(device.index < kMaxDevices, kOp, ": device ", device.str(), " beyond the ", kMaxDevices, " supported");
    if (!attribute_set[device.index]) {
      CUDA_CHECK(cudaFuncSetAttribute(decode_split_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      attribute_set[device.index] = true;
    }
    const dim3 grid(unsigned(plan.splits), unsigned(Hk), unsigned(B * plan.row_blocks));
    // The few-rows kernel for NR rows, with or without the prologue, with its merge.
    const auto rows = [&]<int NR>() {
      const unsigned cluster = merge == DecodeMerge::cluster ? unsigned(plan.splits) : 0;
      const auto run = [&]<bool kPrologue>() {
        const auto go = [&](auto kernel) {
          launch_kernel_in_clusters(kernel, grid, dim3(kThreads), 0, stream, cluster, a);
        };
        if (merge == DecodeMerge::cluster)
          go(decode_split_rows_kernel<D, NR, kPrologue, DecodeMerge::cluster>);
        else if (merge == DecodeMerge::counter)
          go(decode_split_rows_kernel<D, NR, kPrologue, DecodeMerge::counter>);
        else
          go(decode_split_rows_kernel<D, NR, kPrologue>);
      };
      prologue ? run.template operator()<true>() : run.template operator()<false>();
    };
    if (!rows_kernel)
      launch_kernel(decode_split_kernel<D>, grid, dim3(kThreads), smem, stream, a);
    else if (R == 1)
      rows.template operator()<1>();
    else if (R == 2)
      rows.template operator()<2>();
    else
      rows.template operator()<4>();
    if (merge != DecodeMerge::combine_kernel) return;
    const unsigned combine_blocks = unsigned((B * Tq * Hq + kCombineWarps - 1) / kCombineWarps);
    launch_kernel(decode_combine_kernel<D>, dim3(combine_blocks), dim3(kCombineWarps * 32), 0, stream, a);
  };
  if (d == 64)
    launch.template operator()<64>();
  else
    launch.template operator()<128>();
  // The partials return to the allocator here, before the kernels ran: safe, as the caching allocator
  // hands a block out again only in this stream's order.
  return o;
}

}  // namespace

DecodeMerge decode_attention_merge(int64_t B, int64_t Hk, int64_t R, int64_t length, bool has_depth, bool device_held,
                                   Device device) {
  const int sm_count = device_properties(device.index).multiProcessorCount;
  return plan_merge(launch_plan(B, Hk, R, length, device_held, sm_count), B, Hk, R, has_depth, device, sm_count);
}

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                        const DepthSlots& depth, double scale) {
  return run_decode(q, k_cache, v_cache, length, nullptr, depth, scale);
}

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                        const DepthSlots& depth, double scale) {
  check_device_tensor(kOp, "past", past, DType::i32, q.device(),
                      "the position counts are I32 [1] or [B] on q's device");
  FATHOM_CHECK(past.numel() == 1 || past.numel() == q.dim(0), kOp, ": past holds ", past.numel(),
               " counts for a batch of ", q.dim(0), "; give one, or one per sequence");
  return run_decode(q, k_cache, v_cache, k_cache.dim(2), &past, depth, scale);
}

Tensor decode_prologue_attention(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm,
                                 const Tensor& angles, Tensor& cache_k, Tensor& cache_v, const Tensor& past,
                                 double scale) {
  const bool normed = norm.q.defined();
  if (!prologue_fits_attention(q, k, v, norm, cache_k, cache_v))
    return fathom::decode_attention(cuda::decode_prologue(q, k, v, norm, angles, cache_k, cache_v, past), cache_k,
                                    cache_v, past, DepthSlots{}, scale);
  PrologueArgs p{};
  p.k = flash::dev(k.data<bf16>());
  p.v = flash::dev(v.data<bf16>());
  p.q_norm = normed ? flash::dev(norm.q.data<bf16>()) : nullptr;
  p.k_norm = normed ? flash::dev(norm.k.data<bf16>()) : nullptr;
  p.angles = reinterpret_cast<const float2*>(angles.raw());
  p.cache_k = flash::dev(cache_k.data<bf16>());
  p.cache_v = flash::dev(cache_v.data<bf16>());
  p.q_eps = float(norm.q_eps), p.k_eps = float(norm.k_eps);
  p.per_row_angles = angles.rank() == 4;
  return run_decode(q, cache_k, cache_v, cache_k.dim(2), &past, DepthSlots{}, scale, &p);
}

namespace {
// Which kernel decodes: the bf16 split-K kernel above (head dims 64 and 128, with or without depth
// slots), or the fp32 attention kernel (any head dim up to 256, no depth slots).
bool runs_bf16_kernel(const Tensor& q) { return q.dtype() == DType::bf16 && (q.dim(3) == 64 || q.dim(3) == 128); }
bool runs_fp32_kernel(const Tensor& q, const DepthSlots& depth) {
  return q.dtype() == DType::f32 && depth.begin == depth.end && q.dim(3) <= kFp32AttentionMaxHeadDim;
}
}  // namespace

Tensor run_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                            const DepthSlots& depth, double scale) {
  if (runs_fp32_kernel(q, depth)) return decode_attention_fp32(q, k_cache, v_cache, length, scale);
  if (runs_bf16_kernel(q)) return cuda::decode_attention(q, k_cache, v_cache, length, depth, scale);
  // Other head dims in bf16 (tiny models such as the quickstart's 16) and F32 with depth slots have
  // no kernel: the reference decodes them on the host, in f32, and the output goes back.
  auto host = [](const Tensor& t) { return t.defined() ? t.to(Device::cpu()).to(DType::f32) : t; };
  return cpu::decode_attention(host(q), host(k_cache), host(v_cache), length,
                               DepthSlots{host(depth.k), host(depth.v), depth.begin, depth.end}, scale)
      .to(q.dtype())
      .to(q.device());
}

Tensor run_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                            const DepthSlots& depth, double scale) {
  if (runs_fp32_kernel(q, depth)) return decode_attention_fp32(q, k_cache, v_cache, past, scale);
  if (runs_bf16_kernel(q)) return cuda::decode_attention(q, k_cache, v_cache, past, depth, scale);
  // No kernel for these inputs: the reference on host copies, the counts read there too.
  auto host = [](const Tensor& t) { return t.defined() ? t.to(Device::cpu()).to(DType::f32) : t; };
  return cpu::decode_attention(host(q), host(k_cache), host(v_cache), past.to(Device::cpu()),
                               DepthSlots{host(depth.k), host(depth.v), depth.begin, depth.end}, scale)
      .to(q.dtype())
      .to(q.device());
}

}  // namespace fathom::cuda
