// Flash-attention forward: one CTA per (query tile, batch, query head). Each warp owns 16 * MT query
// rows and keeps, per row, one online-softmax state (running max, denominator, unnormalised output)
// across every KV block it attends to; the output is normalised once at the end, and the log-sum-exp
// is written next to it.
//
// KV blocks come from a *source*. The causal sequence is the only source here; the MoDA kernels
// (moda_flash.cuh) add a second one (the depth KV of the tile's tokens) walked after it with the same
// state:  start_source(seq); attend_source(state, seq); start_source(depth); attend_source(state, depth);
#pragma once
#include <cmath>

#include "kernels/attention/attention_mma.cuh"

namespace fathom::cuda::flash {

// Device-side arguments of one forward call. q, o: [B, T, Hq, d]; k, v: [B, T, Hk, d]; lse: [B, Hq, T].
struct ForwardArgs {
  const bf16_t* q;
  const bf16_t* k;
  const bf16_t* v;
  bf16_t* o;
  float* lse;
  int B, T, Hq, Hk, G, d;
  float scale_log2;  // softmax scale times log2(e): scores live in the log2 domain
};

// A CTA's query tile in the forward and dQ grids, (query tile, batch x query head), the last tiles
// first: they walk the most keys, so the short ones fill the tail of the grid. Offsets are of the
// head's first row in [B, T, H, d] tensors; strides step one token.
struct QueryTile {
  int q0, b, h, hk;
  int64_t q_stride, kv_stride, q_off, kv_off;
};
template <class Args>
__device__ __forceinline__ QueryTile query_tile(const Args& a, int BQ) {
  QueryTile t;
  t.q0 = int(gridDim.x - 1 - blockIdx.x) * BQ;
  t.b = int(blockIdx.y) / a.Hq;
  t.h = int(blockIdx.y) % a.Hq;
  t.hk = t.h / a.G;
  t.q_stride = int64_t(a.Hq) * a.d;
  t.kv_stride = int64_t(a.Hk) * a.d;
  t.q_off = (int64_t(t.b) * a.T * a.Hq + t.h) * a.d;
  t.kv_off = (int64_t(t.b) * a.T * a.Hk + t.hk) * a.d;
  return t;
}

// D: head-dim capacity (d <= D; columns past d are zero-filled). WARPS warps of 16 * MT rows each
// make a query tile of BQ rows; KV blocks have BK keys and are double-buffered in shared memory.
template <int D_, int WARPS_, int MT_, int BK_, int MIN_BLOCKS_>
struct ForwardConfig {
  static constexpr int D = D_, WARPS = WARPS_, MT = MT_, BK = BK_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int THREADS = WARPS * 32, BQ = WARPS * MT * 16;
  static constexpr int kTileQ = BQ * D * 2, kTileKV = BK * D * 2;
  static constexpr int kStageBytes = 2 * kTileKV;  // one K tile and one V tile
  static constexpr int kSmemBytes = kTileQ + 2 * kStageBytes;
  static_assert(BK % 16 == 0 && D % 16 == 0, "tiles are whole MMA steps");
};

// One warp's online-softmax state over MT m-tiles; each thread holds rows g and g + 8 of each m-tile
// (index [mt][half]). m is the running max of log2-domain scores, l this thread's share of the
// denominator (the quad is summed at the end), o the unnormalised output.
template <int D, int MT>
struct SoftmaxState {
  float m[MT][2];
  float l[MT][2];
  float o[MT][D / 8][4];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m[mt][h] = -INFINITY;
        l[mt][h] = 0.f;
      }
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.f;
    }
  }
};

// Key j is visible to query row r iff j <= r.
struct CausalMask {
  __device__ __forceinline__ bool visible(int row, int key) const { return key <= row; }
};

// Attends one warp's rows (the first is `row0`, absolute) to one KV block whose first key is `key0`:
// S = Q K^T, the online-softmax update, O += P V. MASKED applies `mask` per (row, key).
template <class Cfg, bool MASKED, class Mask>
__device__ __forceinline__ void attend_block(SoftmaxState<Cfg::D, Cfg::MT>& st,
                                             const uint32_t (&qf)[Cfg::MT][Cfg::D / 16][4], uint32_t sK, uint32_t sV,
                                             int row0, int key0, const Mask& mask, float scale_log2, int lane) {
  constexpr int D = Cfg::D, MT = Cfg::MT, BK = Cfg::BK;
  using Tile = SwizzledTile<D>;
  float s[MT][BK / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int np = 0; np < BK / 16; ++np) {
      uint32_t b[4];
      Tile::load_b(b, sK, np * 16, ks * 16, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816(s[mt][2 * np], qf[mt][ks], b[0], b[1]);
        mma_16816(s[mt][2 * np + 1], qf[mt][ks], b[2], b[3]);
      }
    }

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + mt * 16 + g + 8 * half;
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = s[mt][nt][2 * half + e] * scale_log2;
          if (MASKED && !mask.visible(row, key0 + nt * 8 + 2 * t + e)) x = -INFINITY;
          s[mt][nt][2 * half + e] = x;
          mx = fmaxf(mx, x);
        }
      const float m_new = fmaxf(st.m[mt][half], quad_max(mx));
      // A row that has seen no visible key yet keeps max -inf; exponentiate against 0 so that no
      // inf - inf appears (its probabilities are all 0 either way).
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2_approx(st.m[mt][half] - m_use);
      st.m[mt][half] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2_approx(s[mt][nt][2 * half + e] - m_use);
          s[mt][nt][2 * half + e] = p;
          sum += p;
        }
      st.l[mt][half] = st.l[mt][half] * corr + sum;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        st.o[mt][nt][2 * half] *= corr;
        st.o[mt][nt][2 * half + 1] *= corr;
      }
    }

#pragma unroll
  for (int ks = 0; ks < BK / 16; ++ks) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = pack_bf16(s[mt][2 * ks][0], s[mt][2 * ks][1]);
      pa[mt][1] = pack_bf16(s[mt][2 * ks][2], s[mt][2 * ks][3]);
      pa[mt][2] = pack_bf16(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
      pa[mt][3] = pack_bf16(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
    }
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t b[4];
      Tile::load_b_trans(b, sV, ks * 16, np * 16, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816(st.o[mt][2 * np], pa[mt], b[0], b[1]);
        mma_16816(st.o[mt][2 * np + 1], pa[mt], b[2], b[3]);
      }
    }
  }
}

// The causal sequence as a KV source for the query tile starting at row q0: blocks 0 .. the one
// holding key min(q0 + BQ, T) - 1. Blocks that end at or before q0 are fully visible and skip the mask.
template <class Cfg>
struct SequenceKv {
  const bf16_t* k;
  const bf16_t* v;
  int64_t stride;  // elements between consecutive tokens of one head
  int T, d, q0;

  __device__ __forceinline__ int num_blocks() const {
    const int last = min(q0 + Cfg::BQ, T);
    return (last + Cfg::BK - 1) / Cfg::BK;
  }
  __device__ __forceinline__ int key0(int n) const { return n * Cfg::BK; }
  __device__ __forceinline__ bool masked(int n) const { return n >= (q0 + 1) / Cfg::BK; }
  __device__ __forceinline__ CausalMask mask() const { return {}; }
  __device__ __forceinline__ void load(int n, uint32_t sK, uint32_t sV, int tid) const {
    load_tile_async<Cfg::D, Cfg::BK, Cfg::THREADS>(sK, k, stride, n * Cfg::BK, T, d, tid);
    load_tile_async<Cfg::D, Cfg::BK, Cfg::THREADS>(sV, v, stride, n * Cfg::BK, T, d, tid);
  }
};

// Shared-memory stage s of the double-buffered KV blocks starting at `stages`.
template <class Cfg>
__device__ __forceinline__ uint32_t stage_k(uint32_t stages, int s) {
  return stages + uint32_t(s * Cfg::kStageBytes);
}
template <class Cfg>
__device__ __forceinline__ uint32_t stage_v(uint32_t stages, int s) {
  return stages + uint32_t(s * Cfg::kStageBytes + Cfg::kTileKV);
}

// Issues the copy of a source's first block into stage 0 (callers overlap it with their own loads).
template <class Cfg, class Source>
__device__ __forceinline__ void start_source(const Source& src, uint32_t stages, int tid) {
  if (src.num_blocks() > 0) src.load(0, stage_k<Cfg>(stages, 0), stage_v<Cfg>(stages, 0), tid);
  cp_async_commit();
}

// Walks every block of a source whose first block start_source() issued, prefetching block n + 1
// while block n is consumed: body(n, sK, sV) runs with block n resident in shared memory.
template <class Cfg, class Source, class Body>
__device__ __forceinline__ void for_each_block(const Source& src, uint32_t stages, int tid, Body&& body) {
  const int n_blocks = src.num_blocks();
  for (int n = 0; n < n_blocks; ++n) {
    if (n + 1 < n_blocks) {
      src.load(n + 1, stage_k<Cfg>(stages, (n + 1) & 1), stage_v<Cfg>(stages, (n + 1) & 1), tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    body(n, stage_k<Cfg>(stages, n & 1), stage_v<Cfg>(stages, n & 1));
    __syncthreads();  // the next prefetch overwrites this stage
  }
}

// Attends the warp's rows to every block of a source, updating `st`.
template <class Cfg, class Source>
__device__ __forceinline__ void attend_source(SoftmaxState<Cfg::D, Cfg::MT>& st,
                                              const uint32_t (&qf)[Cfg::MT][Cfg::D / 16][4], const Source& src,
                                              uint32_t stages, int row0, float scale_log2, int tid) {
  const int lane = tid & 31;
  for_each_block<Cfg>(src, stages, tid, [&](int n, uint32_t sK, uint32_t sV) {
    if (src.masked(n))
      attend_block<Cfg, true>(st, qf, sK, sV, row0, src.key0(n), src.mask(), scale_log2, lane);
    else
      attend_block<Cfg, false>(st, qf, sK, sV, row0, src.key0(n), src.mask(), scale_log2, lane);
  });
}

// Loads a warp's A fragments of MT m-tiles x (D / 16) k-steps from a swizzled tile.
template <int D, int MT>
__device__ __forceinline__ void load_row_fragments(uint32_t (&f)[MT][D / 16][4], uint32_t tile, int row0, int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) SwizzledTile<D>::load_a(f[mt][ks], tile, row0 + mt * 16, ks * 16, lane);
}

// The end of a row's walk: per row half, the reciprocal of the denominator (0 for a row that saw no key)
// and the natural-log log-sum-exp (-inf for such a row).
template <int D, int MT>
__device__ __forceinline__ void finish_rows(const SoftmaxState<D, MT>& st, float (&inv)[MT][2], float (&lse)[MT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = quad_sum(st.l[mt][half]), m = st.m[mt][half];
      inv[mt][half] = l > 0.f ? 1.f / l : 0.f;
      lse[mt][half] = m == -INFINITY ? -INFINITY : (m + __log2f(l)) * kLn2;
    }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) flash_forward_kernel(const ForwardArgs a) {
  constexpr int D = Cfg::D, MT = Cfg::MT;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const auto [q0, b, h, hk, q_stride, kv_stride, q_off, kv_off] = query_tile(a, Cfg::BQ);

  const uint32_t sQ = smem_addr(smem), stages = sQ + Cfg::kTileQ;
  load_tile_async<D, Cfg::BQ, Cfg::THREADS>(sQ, a.q + q_off, q_stride, q0, a.T, a.d, tid);
  cp_async_commit();
  const SequenceKv<Cfg> seq{a.k + kv_off, a.v + kv_off, kv_stride, a.T, a.d, q0};
  start_source<Cfg>(seq, stages, tid);
  cp_async_wait<1>();  // Q has landed (the first KV block may still be in flight)
  __syncthreads();

  const int wrow = warp * MT * 16;  // this warp's first row within the tile
  uint32_t qf[MT][D / 16][4];
  load_row_fragments<D, MT>(qf, sQ, wrow, lane);

  SoftmaxState<D, MT> st;
  st.init();
  attend_source<Cfg>(st, qf, seq, stages, q0 + wrow, a.scale_log2, tid);

  // Normalise once; the log-sum-exp goes back to natural log.
  const int g = lane >> 2, t = lane & 3;
  float inv[MT][2], lse[MT][2];
  finish_rows(st, inv, lse);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = q0 + wrow + mt * 16 + g + 8 * half;
      if (t == 0 && row < a.T) a.lse[(int64_t(b) * a.Hq + h) * a.T + row] = lse[mt][half];
    }
  // The Q tile is free (its fragments are in registers): stage O there for 16-byte stores.
  stage_accumulator<D, MT>(smem, st.o, inv, wrow, lane);
  __syncthreads();
  store_tile<D, Cfg::BQ, Cfg::THREADS>(a.o + q_off, q_stride, q0, a.T, a.d, smem, tid);
}

}  // namespace fathom::cuda::flash
