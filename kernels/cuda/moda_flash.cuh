// The flash-style MoDA kernels (flat, chunk, group) on top of fathom's flash attention: the same
// tiles, MMA fragments, online-softmax state and block walks (attention_forward.cuh,
// attention_backward.cuh), with a second KV source, the depth slots, walked after the causal sequence.
//
// A CTA owns the rows of `tokens` consecutive tokens times `fold` query heads, row r -> token
// t0 + r / fold, head hbase + r % fold:
//   flat, chunk: fold = 1 (one head, BQ tokens per tile);
//   group:       fold = G (the G query heads of one KV head, BQ / G whole tokens per tile, so every
//                K/V tile load serves all G heads and a token's rows never straddle two tiles).
// Depth columns: column c of the tile's (b, KV head) is slot begin + c % L of token c / L. flat walks
// all T * L of them (the paper's "flash-compatible" layout: dense utilisation 1 / T); chunk and group
// walk only their own tokens' columns [t0 * L, t_end * L). A row sees column c iff c / L is its token.
//
// Backward: the sequence dK/dV pass of flash attention runs unchanged (it needs only the joint lse);
// the dQ kernel here walks sequence then depth blocks. For group it also computes the depth dK/dV of
// each depth block: the tile holds every row that sees those columns, so P and dS go through shared
// memory and warps switch from owning rows to owning columns (dVd = P^T dO, dKd = dS^T Q); each
// gradient element is added by one thread, no atomics. flat and chunk tiles hold one head only, so
// their depth gradients come from a small kernel that sums a token's G heads in a fixed order.
#pragma once
#include "kernels/cuda/attention_backward.cuh"

namespace fathom::cuda::moda {

using flash::bf16_t;

struct ModaArgs {
  const bf16_t* q;   // [B, T, Hq, d]
  const bf16_t* k;   // [B, T, Hk, d]
  const bf16_t* v;
  const bf16_t* kd;  // [B, T, S, Hk, d]
  const bf16_t* vd;
  bf16_t* o;
  float* lse;  // [B, Hq, T]
  // Backward only.
  const bf16_t* dout;
  bf16_t* dq;
  const float* lse2;   // [B, Hq, Tpad]: lse * log2(e), from flash's prepare kernel
  const float* delta;  // [B, Hq, Tpad]: rowsum(dO * O)
  float* ddk;          // [B, T, S, Hk, d], added into for slots [begin, begin + L)
  float* ddv;
  int B, T, Tpad, Hq, Hk, G, d, S, begin, L;
  int fold;        // query heads folded into a tile's rows
  int tokens;      // tokens per tile
  bool all_depth;  // flat: every tile walks all T * L depth columns
  float scale, scale_log2;
};

// The rows a CTA owns (see the file comment). Rows at or past `rows` are padding: zero Q and dO.
struct TileRows {
  int b, hk, hbase, t0, t_end, fold, rows;
  __device__ __forceinline__ int token(int r) const { return t0 + r / fold; }
  __device__ __forceinline__ int head(int r) const { return hbase + r % fold; }
  __device__ __forceinline__ bool valid(int r) const { return r < rows; }
};

// Heaviest (last) tiles first, so the short ones fill the tail of the grid.
__device__ __forceinline__ TileRows tile_rows(const ModaArgs& a) {
  const int groups = a.Hq / a.fold;
  TileRows tr;
  tr.b = int(blockIdx.y) / groups;
  tr.hbase = int(blockIdx.y) % groups * a.fold;
  tr.hk = tr.hbase / a.G;
  tr.fold = a.fold;
  tr.t0 = int(gridDim.x - 1 - blockIdx.x) * a.tokens;
  tr.t_end = min(tr.t0 + a.tokens, a.T);
  tr.rows = (tr.t_end - tr.t0) * a.fold;
  return tr;
}

// Element offset of row r's vector in a [B, T, Hq, d] tensor.
__device__ __forceinline__ int64_t row_offset(const ModaArgs& a, const TileRows& tr, int r) {
  return ((int64_t(tr.b) * a.T + tr.token(r)) * a.Hq + tr.head(r)) * a.d;
}

// Index of row r in the [B, Hq, T] (or [B, Hq, Tpad] with stride Tpad) statistics.
__device__ __forceinline__ int64_t stat_index(const TileRows& tr, int Hq, int stride, int r) {
  return (int64_t(tr.b) * Hq + tr.head(r)) * stride + tr.token(r);
}

// Loads rows [0, ROWS) of the tile from a [B, T, Hq, d] tensor (padding rows zero-filled).
template <class Cfg>
__device__ __forceinline__ void load_query_rows(uint32_t tile, const bf16_t* x, const ModaArgs& a, const TileRows& tr,
                                                int tid) {
  flash::load_rows_async<Cfg::D, Cfg::BQ, Cfg::THREADS>(
      tile, [&](int r) -> const bf16_t* { return tr.valid(r) ? x + row_offset(a, tr, r) : nullptr; }, x, a.d, tid);
}

// Key j is visible to row r iff j <= token(r).
struct FoldedCausalMask {
  int t0, fold;
  __device__ __forceinline__ bool visible(int row, int key) const { return key <= t0 + row / fold; }
};

// Depth column c is visible to row r iff it is one of token(r)'s columns and the tile walks it.
struct SameTokenMask {
  int t0, fold, L, c_end;
  __device__ __forceinline__ bool visible(int row, int c) const {
    const int lo = (t0 + row / fold) * L;
    return c >= lo && c < lo + L && c < c_end;
  }
};

// The causal sequence for tokens [t0, t_end): key blocks up to the one holding key t_end - 1; blocks
// whose keys all precede t0 are fully visible and skip the mask.
template <class Cfg>
struct FoldedSequenceKv {
  const bf16_t* k;
  const bf16_t* v;
  int64_t stride;
  int T, d, t0, t_end, fold;

  __device__ __forceinline__ int num_blocks() const { return (t_end + Cfg::BK - 1) / Cfg::BK; }
  __device__ __forceinline__ int key0(int n) const { return n * Cfg::BK; }
  __device__ __forceinline__ bool masked(int n) const { return n >= (t0 + 1) / Cfg::BK; }
  __device__ __forceinline__ FoldedCausalMask mask() const { return {t0, fold}; }
  __device__ __forceinline__ void load(int n, uint32_t sK, uint32_t sV, int tid) const {
    flash::load_tile_async<Cfg::D, Cfg::BK, Cfg::THREADS>(sK, k, stride, n * Cfg::BK, T, d, tid);
    flash::load_tile_async<Cfg::D, Cfg::BK, Cfg::THREADS>(sV, v, stride, n * Cfg::BK, T, d, tid);
  }
};

template <class Cfg>
__device__ __forceinline__ FoldedSequenceKv<Cfg> sequence_source(const ModaArgs& a, const TileRows& tr) {
  const int64_t off = (int64_t(tr.b) * a.T * a.Hk + tr.hk) * a.d;
  return {a.k + off, a.v + off, int64_t(a.Hk) * a.d, a.T, a.d, tr.t0, tr.t_end, tr.fold};
}

// Depth columns [c0, c_end) of one (batch, KV head), in blocks of BK from c0; every block is masked.
template <class Cfg>
struct DepthKv {
  const bf16_t* kd;  // at (b, token 0, slot `begin`, hk)
  const bf16_t* vd;
  int64_t token_stride, slot_stride;
  int L, d, c0, c_end;
  SameTokenMask m;

  __device__ __forceinline__ int num_blocks() const { return (c_end - c0 + Cfg::BK - 1) / Cfg::BK; }
  __device__ __forceinline__ int key0(int n) const { return c0 + n * Cfg::BK; }
  __device__ __forceinline__ bool masked(int) const { return true; }
  __device__ __forceinline__ SameTokenMask mask() const { return m; }
  __device__ __forceinline__ int64_t column_offset(int c) const {
    return int64_t(c / L) * token_stride + int64_t(c % L) * slot_stride;
  }
  __device__ __forceinline__ void load(int n, uint32_t sK, uint32_t sV, int tid) const {
    const int first = key0(n);
    flash::load_rows_async<Cfg::D, Cfg::BK, Cfg::THREADS>(
        sK, [&](int r) -> const bf16_t* { return first + r < c_end ? kd + column_offset(first + r) : nullptr; }, kd,
        d, tid);
    flash::load_rows_async<Cfg::D, Cfg::BK, Cfg::THREADS>(
        sV, [&](int r) -> const bf16_t* { return first + r < c_end ? vd + column_offset(first + r) : nullptr; }, vd,
        d, tid);
  }
};

template <class Cfg>
__device__ __forceinline__ DepthKv<Cfg> depth_source(const ModaArgs& a, const TileRows& tr) {
  const int64_t slot_stride = int64_t(a.Hk) * a.d, token_stride = int64_t(a.S) * slot_stride;
  const int64_t off = int64_t(tr.b) * a.T * token_stride + int64_t(a.begin) * slot_stride + int64_t(tr.hk) * a.d;
  const int c0 = a.all_depth ? 0 : tr.t0 * a.L, c_end = a.all_depth ? a.T * a.L : tr.t_end * a.L;
  return {a.kd + off, a.vd + off, token_stride, slot_stride, a.L, a.d, c0, c_end,
          SameTokenMask{tr.t0, tr.fold, a.L, c_end}};
}

// ---------------------------------------------------------------------------------------------
// Forward: flash attention's forward with folded rows and the depth source after the sequence.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) moda_forward_kernel(const ModaArgs a) {
  constexpr int D = Cfg::D, MT = Cfg::MT;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const TileRows tr = tile_rows(a);

  const uint32_t sQ = flash::smem_addr(smem), stages = sQ + Cfg::kTileQ;
  load_query_rows<Cfg>(sQ, a.q, a, tr, tid);
  flash::cp_async_commit();
  const FoldedSequenceKv<Cfg> seq = sequence_source<Cfg>(a, tr);
  flash::start_source<Cfg>(seq, stages, tid);
  flash::cp_async_wait<1>();
  __syncthreads();

  const int wrow = warp * MT * 16;
  uint32_t qf[MT][D / 16][4];
  flash::load_row_fragments<D, MT>(qf, sQ, wrow, lane);

  flash::SoftmaxState<D, MT> st;
  st.init();
  flash::attend_source<Cfg>(st, qf, seq, stages, wrow, a.scale_log2, tid);
  const DepthKv<Cfg> depth = depth_source<Cfg>(a, tr);
  flash::start_source<Cfg>(depth, stages, tid);  // the sequence walk ended with a barrier: stage 0 is free
  flash::attend_source<Cfg>(st, qf, depth, stages, wrow, a.scale_log2, tid);

  const int g = lane >> 2, t = lane & 3;
  float inv[MT][2], lse[MT][2];
  flash::finish_rows(st, inv, lse);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wrow + mt * 16 + g + 8 * half;
      if (t == 0 && tr.valid(r)) a.lse[stat_index(tr, a.Hq, a.T, r)] = lse[mt][half];
    }
  flash::stage_accumulator<D, MT>(smem, st.o, inv, wrow, lane);
  __syncthreads();
  flash::store_rows<D, Cfg::BQ, Cfg::THREADS>(
      [&](int r) -> bf16_t* { return tr.valid(r) ? a.o + row_offset(a, tr, r) : nullptr; }, a.d, smem, tid);
}

// ---------------------------------------------------------------------------------------------
// Backward dQ (and, with DEPTH_GRADS, the depth dK/dV of the tile's tokens).

// Shared memory: Q and dO tiles and the KV stages as in flash's dQ kernel, then (DEPTH_GRADS) the
// bf16 P and dS of one depth block, [BQ x BK] each.
template <class Cfg, bool DEPTH_GRADS>
constexpr int dq_smem_bytes() {
  return flash::dq_smem_bytes<Cfg>() + (DEPTH_GRADS ? 2 * Cfg::BQ * Cfg::BK * 2 : 0);
}

// Depth dK/dV of the columns [key0, key0 + BK) ∩ [.., c_end) of a block whose P and dS (bf16, rows =
// the tile's rows) are in sP and sDS. Warp w owns 16 columns, (w % (BK / 16)), and one of dV = P^T dO
// (the first BK / 16 warps) or dK = scale dS^T Q; only the 16-row steps holding rows of the columns'
// tokens are multiplied. Results are added into ddk / ddv, one thread per element.
template <class Cfg>
__device__ __forceinline__ void depth_block_grads(const ModaArgs& a, const TileRows& tr, int key0, int c_end,
                                                  uint32_t sP, uint32_t sDS, uint32_t sQ, uint32_t sDO, int warp,
                                                  int lane) {
  constexpr int D = Cfg::D, BK = Cfg::BK, kGroups = BK / 16;
  static_assert(Cfg::WARPS == 2 * kGroups, "one warp per (16 depth columns, dK or dV)");
  const int cg = warp % kGroups;
  const bool is_k = warp >= kGroups;
  const int c_first = key0 + cg * 16;
  if (c_first >= c_end) return;
  const int c_last = min(c_first + 16, c_end) - 1;
  const int r_lo = (c_first / a.L - tr.t0) * tr.fold, r_hi = (c_last / a.L - tr.t0 + 1) * tr.fold;

  float acc[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
  const uint32_t sA = is_k ? sDS : sP, sB = is_k ? sQ : sDO;
  for (int ks = r_lo / 16; ks < (r_hi + 15) / 16; ++ks) {
    uint32_t af[4];
    flash::SwizzledTile<BK>::load_a_trans(af, sA, cg * 16, ks * 16, lane);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t bf[4];
      flash::SwizzledTile<D>::load_b_trans(bf, sB, ks * 16, np * 16, lane);
      flash::mma_16816(acc[2 * np], af, bf[0], bf[1]);
      flash::mma_16816(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }

  const int g = lane >> 2, t = lane & 3;
  const float factor = is_k ? a.scale : 1.f;
  float* dst = is_k ? a.ddk : a.ddv;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int c = c_first + g + 8 * half;
    if (c > c_last) continue;
    const int64_t row = (((int64_t(tr.b) * a.T + c / a.L) * a.S + a.begin + c % a.L) * a.Hk + tr.hk) * a.d;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      if (col >= a.d) continue;
      float2* p = reinterpret_cast<float2*>(dst + row + col);
      float2 x = *p;
      x.x += acc[nt][2 * half] * factor;
      x.y += acc[nt][2 * half + 1] * factor;
      *p = x;
    }
  }
}

template <class Cfg, bool DEPTH_GRADS>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) moda_backward_dq_kernel(const ModaArgs a) {
  constexpr int D = Cfg::D, MT = Cfg::MT, BK = Cfg::BK;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2;
  const TileRows tr = tile_rows(a);

  const uint32_t sQ = flash::smem_addr(smem), stages = sQ + Cfg::kTileQ, sDO = stages + 2 * Cfg::kStageBytes;
  constexpr int p_offset = flash::dq_smem_bytes<Cfg>(), ds_offset = p_offset + Cfg::BQ * BK * 2;
  load_query_rows<Cfg>(sQ, a.q, a, tr, tid);
  load_query_rows<Cfg>(sDO, a.dout, a, tr, tid);
  flash::cp_async_commit();
  const FoldedSequenceKv<Cfg> seq = sequence_source<Cfg>(a, tr);
  flash::start_source<Cfg>(seq, stages, tid);
  flash::cp_async_wait<1>();
  __syncthreads();

  const int wrow = warp * MT * 16;
  uint32_t qf[MT][D / 16][4], df[MT][D / 16][4];
  flash::load_row_fragments<D, MT>(qf, sQ, wrow, lane);
  flash::load_row_fragments<D, MT>(df, sDO, wrow, lane);
  // Padding rows: lse2 = +inf makes their probabilities 0.
  float lse2[MT][2], delta[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wrow + mt * 16 + g + 8 * half;
      const bool valid = tr.valid(r);
      lse2[mt][half] = valid ? a.lse2[stat_index(tr, a.Hq, a.Tpad, r)] : INFINITY;
      delta[mt][half] = valid ? a.delta[stat_index(tr, a.Hq, a.Tpad, r)] : 0.f;
    }

  float dq[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[mt][nt][e] = 0.f;

  flash::for_each_block<Cfg>(seq, stages, tid, [&](int n, uint32_t sK, uint32_t sV) {
    float p[MT][BK / 8][4], ds[MT][BK / 8][4];
    flash::dq_block_scores<Cfg>(p, ds, qf, df, lse2, delta, sK, sV, wrow, seq.key0(n), seq.masked(n), seq.mask(),
                                a.scale_log2, lane);
    flash::dq_block_accumulate<Cfg>(dq, ds, sK, lane);
  });

  const DepthKv<Cfg> depth = depth_source<Cfg>(a, tr);
  flash::start_source<Cfg>(depth, stages, tid);
  flash::for_each_block<Cfg>(depth, stages, tid, [&](int n, uint32_t sK, uint32_t sV) {
    float p[MT][BK / 8][4], ds[MT][BK / 8][4];
    flash::dq_block_scores<Cfg>(p, ds, qf, df, lse2, delta, sK, sV, wrow, depth.key0(n), true, depth.mask(),
                                a.scale_log2, lane);
    if constexpr (DEPTH_GRADS) {
      float ones[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ones[mt][0] = ones[mt][1] = 1.f;
      flash::stage_accumulator<BK, MT>(smem + p_offset, p, ones, wrow, lane);
      flash::stage_accumulator<BK, MT>(smem + ds_offset, ds, ones, wrow, lane);
    }
    flash::dq_block_accumulate<Cfg>(dq, ds, sK, lane);
    if constexpr (DEPTH_GRADS) {
      __syncthreads();  // every warp's P and dS rows are staged
      depth_block_grads<Cfg>(a, tr, depth.key0(n), depth.c_end, sQ + p_offset, sQ + ds_offset, sQ, sDO, warp, lane);
    }
  });

  float qscale[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) qscale[mt][0] = qscale[mt][1] = a.scale;
  flash::stage_accumulator<D, MT>(smem, dq, qscale, wrow, lane);
  __syncthreads();
  flash::store_rows<D, Cfg::BQ, Cfg::THREADS>(
      [&](int r) -> bf16_t* { return tr.valid(r) ? a.dq + row_offset(a, tr, r) : nullptr; }, a.d, smem, tid);
}

// ---------------------------------------------------------------------------------------------
// Depth dK/dV for flat and chunk, whose tiles hold one head: one warp per (b, token, slot, KV head)
// sums the token's G query heads in order, D / 32 elements per lane:
//   p = exp2(q . kd * scale_log2 - lse2), ds = p (dO . vd - delta), dKd += scale ds q, dVd += p dO.
template <int E>
__device__ __forceinline__ void load_lane(float (&x)[E], const bf16_t* p) {
  static_assert(E == 2 || E == 4, "2 or 4 bf16 per lane");
  if constexpr (E == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    x[0] = lo.x, x[1] = lo.y, x[2] = hi.x, x[3] = hi.y;
  } else {
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(p);
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw));
    x[0] = lo.x, x[1] = lo.y;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(256) moda_depth_grads_kernel(const ModaArgs a) {
  constexpr int E = D / 32;
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= int64_t(a.B) * a.T * a.L * a.Hk) return;  // whole warps
  const int hk = int(w % a.Hk), slot = int(w / a.Hk % a.L), t = int(w / (int64_t(a.Hk) * a.L) % a.T);
  const int b = int(w / (int64_t(a.Hk) * a.L * a.T));
  const int64_t drow = (((int64_t(b) * a.T + t) * a.S + a.begin + slot) * a.Hk + hk) * a.d + lane * E;
  float kd[E], vd[E], dk[E] = {}, dv[E] = {};
  load_lane<E>(kd, a.kd + drow);
  load_lane<E>(vd, a.vd + drow);
  for (int gi = 0; gi < a.G; ++gi) {
    const int h = hk * a.G + gi;
    const int64_t qrow = ((int64_t(b) * a.T + t) * a.Hq + h) * a.d + lane * E;
    float q[E], go[E];
    load_lane<E>(q, a.q + qrow);
    load_lane<E>(go, a.dout + qrow);
    float s = 0.f, dp = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      s = fmaf(q[i], kd[i], s);
      dp = fmaf(go[i], vd[i], dp);
    }
    s = warp_sum(s);
    dp = warp_sum(dp);
    const int64_t stat = (int64_t(b) * a.Hq + h) * a.Tpad + t;
    const float p = exp2f(s * a.scale_log2 - a.lse2[stat]);
    const float ds = p * (dp - a.delta[stat]);
#pragma unroll
    for (int i = 0; i < E; ++i) {
      dk[i] = fmaf(ds, q[i], dk[i]);
      dv[i] = fmaf(p, go[i], dv[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < E; ++i) {
    a.ddk[drow + i] += a.scale * dk[i];
    a.ddv[drow + i] += dv[i];
  }
}

}  // namespace fathom::cuda::moda
