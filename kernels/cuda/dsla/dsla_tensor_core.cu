// Tensor-core DSLA training kernels (bf16 q, k, v, do; fp32 gates, states and accumulation), chunks of 64.
// Both states are handled by every block from one load of its chunk's q, k, v (and do); only the gates
// and states differ. The sequence is parallel over chunks in two passes:
//   1. per chunk n and state: U_n = (k e^{b_L - b})^T v (and for the backward W_n = scale (q e^{b})^T do),
//      the chunk's contribution to the state (to the state gradient), and the chunk's total gate b_L;
//   2. a scan over chunks per state element turns them, in place, into each chunk's starting state
//      S_n (forward order, from the initial state) and state gradient dH_n (reverse order, from zero);
//   3. per chunk: the outputs (forward) or dq, dk, dv and the gate gradient (backward, three kernels
//      that each read the chunk once for both states), with the intra-chunk terms as in
//      dsla_tensor_core.cuh.
// The state contribution's bf16 operand k e^{b_L - b} is split into a high and a low bf16 part (one
// product over both), so the carried fp32 states keep about 16 bits of that factor, not 8.
// Backward, per state with unweighted output gradient (w_1 = gamma, w_2 = 1 - gamma weigh them after):
//   dq' = scale (e^{b} (do S^T) + sum_j D_tj k_j e^{b_t - b_j}),  D = do v^T
//   dk' = scale sum_t D_tj q_t e^{b_t - b_j} + e^{b_L - b_j} (v dH^T)
//   dv' = scale A^T do + (k e^{b_L - b}) dH
//   dg  = w suffix sums of (q dq' - k dk'),  dgamma = sum v . (dv'_1 - dv'_2) (= sum do . (o_1 - o_2), as
//   o is linear in v from a zero state). Sums across blocks run in a fixed order: bit-identical runs.
#include <algorithm>

#include "kernels/cuda/dsla/dsla_launch.h"
#include "kernels/cuda/dsla/dsla_tensor_core.cuh"
#include "kernels/cuda/runtime/device_math.cuh"
#include "kernels/cuda/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using namespace dsla_tc;

using RowM = wm::row_major;
using ColM = wm::col_major;

// The six sub-block pairs (I, J), J < I, of a chunk's off-diagonal scores.
__constant__ int kPairI[6] = {1, 2, 2, 3, 3, 3};
__constant__ int kPairJ[6] = {0, 0, 1, 0, 1, 2};

template <int D>
struct Strides {
  static constexpr int LB = ldb<D>(), LF = ldf<D>(), NE = kChunk * D / kThreads;
  static constexpr int rows_bytes = kChunk * LB * 2;    // bf16 [64][LB]
  static constexpr int gates_bytes = kChunk * LF * 4;   // fp32 [64][LF]
  static constexpr int score_f_bytes = kChunk * kLdScoreF * 4, score_b_bytes = kChunk * kLdScoreB * 2;
  __host__ __device__ static constexpr int bf16_rows(int rows) { return rows * LB * 2; }
};

__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }

// Qt (q_t e^{b_t - b_16I} for rows t >= 16, row t - 16) and Kt (k_j e^{b_16I - b_j}, j < 16 I, rows from
// key_rows_offset(I)): the factor operands of the off-diagonal scores.
template <int D>
__device__ __forceinline__ void build_score_factors(bf16* qt, bf16* kt, const bf16* qs, const bf16* ks, const float* bs) {
  constexpr int LB = ldb<D>(), LF = ldf<D>();
  for (int i = threadIdx.x; i < 48 * D; i += kThreads) {
    const int r = i / D, c = i % D, t = 16 + r, ref = t / 16 * 16;
    qt[r * LB + c] = __float2bfloat16_rn(bf(qs[t * LB + c]) * exp2f(bs[t * LF + c] - bs[ref * LF + c]));
  }
  for (int i = threadIdx.x; i < kFactorRows * D; i += kThreads) {
    const int r = i / D, c = i % D, I = r < 16 ? 1 : r < 48 ? 2 : 3, j = r - key_rows_offset(I);
    kt[r * LB + c] = __float2bfloat16_rn(bf(ks[j * LB + c]) * exp2f(bs[16 * I * LF + c] - bs[j * LF + c]));
  }
}

// A[t][j] = sum_c q_tc k_jc e^{b_tc - b_jc} for j <= t into as (fp32 [64][kLdScoreF]; entries above the
// diagonal are left unwritten): warps 0..5 take the off-diagonal tiles, every thread the exact diagonal.
template <int D>
__device__ __forceinline__ void chunk_scores(float* as, const bf16* qt, const bf16* kt, const bf16* qs, const bf16* ks,
                                             const float* bs) {
  constexpr int LB = ldb<D>(), LF = ldf<D>();
  const int warp = threadIdx.x / 32;
  if (warp < 6) {
    const int I = kPairI[warp], J = kPairJ[warp];
    tile_product<RowM, ColM>(0, 0, D, qt + 16 * (I - 1) * LB, LB, kt + (key_rows_offset(I) + 16 * J) * LB, LB,
                             as + 16 * I * kLdScoreF + 16 * J, kLdScoreF, false);
  }
  for (int idx = threadIdx.x; idx < 4 * kSub * kSub; idx += kThreads) {
    const int I = idx / (kSub * kSub), tl = idx / kSub % kSub, jl = idx % kSub, t = 16 * I + tl, j = 16 * I + jl;
    float a = 0.0f;
    if (jl <= tl) {
#pragma unroll 8
      for (int c = 0; c < D; ++c)
        a += bf(qs[t * LB + c]) * bf(ks[j * LB + c]) * exp2f(bs[t * LF + c] - bs[j * LF + c]);
    }
    as[t * kLdScoreF + j] = a;
  }
}

// ---------------------------------------------------------------------------------------------------
// Pass 1: chunk contributions. KEYS: x = k, y = v (KV head), factor e^{b_L - b_t}, and the totals b_L.
// Otherwise x = q, y = do (query head), factor scale e^{b_t}.
template <int D, bool TWO, bool KEYS>
__global__ void __launch_bounds__(kThreads)
    chunk_contributions_kernel(const bf16* __restrict__ x, const bf16* __restrict__ y, const float* __restrict__ g1,
                               const float* __restrict__ g2, float* __restrict__ states, float* __restrict__ totals,
                               int64_t T_len, int H, int Hk, int N) {
  using St = Strides<D>;
  constexpr int NS = TWO ? 2 : 1, LB = St::LB, LF = St::LF;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* xs = reinterpret_cast<bf16*>(smem);
  bf16* xf = reinterpret_cast<bf16*>(smem + St::rows_bytes);      // [128][LB]: high parts, then low parts
  bf16* ys = reinterpret_cast<bf16*>(smem + 3 * St::rows_bytes);  // [128][LB]: y twice
  float* bs = reinterpret_cast<float*>(smem + 5 * St::rows_bytes);
  const int n = blockIdx.x, h = blockIdx.y, hk = h / (H / Hk);
  const int64_t b = blockIdx.z, t0 = int64_t(n) * kChunk;
  const int L = chunk_rows(t0, T_len);
  const int heads = KEYS ? Hk : H, head = KEYS ? hk : h;
  const float scale = rsqrtf(float(D));
  load_rows<D>(xs, x, b, t0, L, T_len, heads, head);
  load_rows<D>(ys, y, b, t0, L, T_len, heads, head);
  load_rows<D>(ys + kChunk * LB, y, b, t0, L, T_len, heads, head);
  for (int s = 0; s < NS; ++s) {
    __syncthreads();  // the previous state's product is done with xf and bs
    load_cumulative_gates<D>(bs, s == 0 ? g1 : g2, b, t0, L, T_len, H, h);
    for (int i = threadIdx.x; i < kChunk * D; i += kThreads) {
      const int t = i / D, c = i % D;
      const float bt = bs[t * LF + c];
      const float f = KEYS ? exp2f(bs[(kChunk - 1) * LF + c] - bt) : scale * exp2f(bt);
      const float val = bf(xs[t * LB + c]) * f;
      const bf16 hi = __float2bfloat16_rn(val);
      xf[t * LB + c] = hi;
      xf[(t + kChunk) * LB + c] = __float2bfloat16_rn(val - bf(hi));
    }
    const int64_t slot = ((b * H + h) * NS + s) * N + n;
    if (KEYS)
      for (int c = threadIdx.x; c < D; c += kThreads) totals[slot * D + c] = bs[(kChunk - 1) * LF + c];
    __syncthreads();
    // [D x 128] (xf^T, column-major view of [t][c]) times [128 x D] (ys), straight into the global slot.
    block_product<ColM, RowM>(D, D, 2 * kChunk, xf, LB, ys, LB, states + slot * D * D, D, false);
  }
}

// Pass 2: per state element, the chunks' contributions become each chunk's starting value in place:
// forward from `init` (zeros when null; the end value goes to `fin` when not null), or in reverse from 0.
__global__ void state_scan_kernel(float* __restrict__ states, const float* __restrict__ totals, const float* init1,
                                  const float* init2, float* fin1, float* fin2, int64_t BH, int NS, int N, int D,
                                  bool reverse) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, DD = int64_t(D) * D;
  if (i >= BH * NS * DD) return;
  const int64_t ce = i % DD, bh = i / (DD * NS);
  const int s = int(i / DD % NS), c = int(ce / D);
  const float* init = s == 0 ? init1 : init2;
  float cur = init != nullptr ? init[bh * DD + ce] : 0.0f;
  float* col = states + (bh * NS + s) * N * DD + ce;
  const float* tot = totals + (bh * NS + s) * int64_t(N) * D + c;
  constexpr int U = 8;  // loads issued ahead of the dependent chain
  for (int base = 0; base < N; base += U) {
    float u[U], a[U];
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int n = reverse ? N - 1 - (base + k) : base + k;
      if (base + k < N) u[k] = col[n * DD], a[k] = tot[int64_t(n) * D];
    }
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int n = reverse ? N - 1 - (base + k) : base + k;
      if (base + k < N) {
        col[n * DD] = cur;
        cur = exp2f(a[k]) * cur + u[k];
      }
    }
  }
  float* fin = s == 0 ? fin1 : fin2;
  if (fin != nullptr) fin[bh * DD + ce] = cur;
}

// ---------------------------------------------------------------------------------------------------
// Forward outputs: o = scale sum_s w_s ((q e^{b}) S_n + A v).
template <int D>
struct ForwardOutLayout {
  using St = Strides<D>;
  static constexpr int x_rows = 64 + D > 144 ? 64 + D : 144;
  static constexpr int q = 0, k = q + St::rows_bytes, v = k + St::rows_bytes, b = v + St::rows_bytes,
                       x = b + St::gates_bytes, acc = x + St::bf16_rows(x_rows), as = acc + St::gates_bytes,
                       ab = as + St::score_f_bytes, bytes = ab + St::score_b_bytes;
};

template <int D, bool TWO>
__global__ void __launch_bounds__(kThreads)
    forward_output_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                          const float* __restrict__ g1, const float* __restrict__ g2, const float* __restrict__ gamma,
                          const float* __restrict__ states, bf16* __restrict__ o, int64_t T_len, int H, int Hk, int N) {
  using St = Strides<D>;
  using Ly = ForwardOutLayout<D>;
  constexpr int NS = TWO ? 2 : 1, LB = St::LB, LF = St::LF, NE = St::NE;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *qs = reinterpret_cast<bf16*>(smem + Ly::q), *ks = reinterpret_cast<bf16*>(smem + Ly::k),
       *vs = reinterpret_cast<bf16*>(smem + Ly::v);
  float* bs = reinterpret_cast<float*>(smem + Ly::b);
  bf16 *qh = reinterpret_cast<bf16*>(smem + Ly::x), *sb = qh + kChunk * LB;  // phase 1
  bf16 *qt = qh, *kt = qh + 48 * LB;                                        // phase 2
  float *acc = reinterpret_cast<float*>(smem + Ly::acc), *as = reinterpret_cast<float*>(smem + Ly::as);
  bf16* ab = reinterpret_cast<bf16*>(smem + Ly::ab);
  const int n = blockIdx.x, h = blockIdx.y, hk = h / (H / Hk);
  const int64_t b = blockIdx.z, t0 = int64_t(n) * kChunk;
  const int L = chunk_rows(t0, T_len);
  const float scale = rsqrtf(float(D));
  load_rows<D>(qs, q, b, t0, L, T_len, H, h);
  load_rows<D>(ks, k, b, t0, L, T_len, Hk, hk);
  load_rows<D>(vs, v, b, t0, L, T_len, Hk, hk);
  float out[NE];
#pragma unroll
  for (int i = 0; i < NE; ++i) out[i] = 0.0f;
#pragma unroll 1  // one state at a time keeps the per-state registers once
  for (int s = 0; s < NS; ++s) {
    const float w = TWO ? (s == 0 ? gamma[h] : 1.0f - gamma[h]) : 1.0f;
    const int64_t slot = ((b * H + h) * NS + s) * N + n;
    __syncthreads();
    load_cumulative_gates<D>(bs, s == 0 ? g1 : g2, b, t0, L, T_len, H, h);
    for (int i = threadIdx.x; i < kChunk * D; i += kThreads) {
      const int t = i / D, c = i % D;
      qh[t * LB + c] = __float2bfloat16_rn(bf(qs[t * LB + c]) * exp2f(bs[t * LF + c]));
    }
    load_state<D>(sb, states + slot * D * D);
    __syncthreads();
    block_product<RowM, RowM>(kChunk, D, D, qh, LB, sb, LB, acc, LF, false);
    __syncthreads();
    build_score_factors<D>(qt, kt, qs, ks, bs);
    __syncthreads();
    chunk_scores<D>(as, qt, kt, qs, ks, bs);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += kThreads) {
      const int t = idx / kChunk, j = idx % kChunk;
      ab[t * kLdScoreB + j] = __float2bfloat16_rn(j <= t ? as[t * kLdScoreF + j] : 0.0f);
    }
    __syncthreads();
    block_product<RowM, RowM>(kChunk, D, kChunk, ab, kLdScoreB, vs, LB, acc, LF, true);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      out[i] += w * scale * acc[idx / D * LF + idx % D];
    }
  }
#pragma unroll
  for (int i = 0; i < NE; ++i) {
    const int idx = threadIdx.x + i * kThreads, t = idx / D, c = idx % D;
    if (t < L) o[((b * T_len + t0 + t) * H + h) * int64_t(D) + c] = __float2bfloat16_rn(out[i]);
  }
}

// ---------------------------------------------------------------------------------------------------
// Backward. Every kernel loads q, k, v, do of its chunk once and forms D = do v^T (fp32 dm, and bf16 db
// masked to j <= t).
template <int D>
struct BackwardLayout {
  using St = Strides<D>;
  static constexpr int x_rows = (64 + D > 144 ? 64 + D : 144);
  static constexpr int q = 0, k = q + St::rows_bytes, v = k + St::rows_bytes, dO = v + St::rows_bytes,
                       b = dO + St::rows_bytes, dm = b + St::gates_bytes, db = dm + St::score_f_bytes,
                       x = db + St::score_b_bytes, acc = x + St::bf16_rows(x_rows),
                       as = acc,  // the scores (dv kernel) are done before acc is written
                       ab = acc + St::gates_bytes, red = ab + St::score_b_bytes, bytes = red + 32 * 4;
};

template <int D>
struct BackwardSmem {
  bf16 *qs, *ks, *vs, *dos, *db, *x, *ab;
  float *bs, *dm, *acc, *as, *red;
  __device__ explicit BackwardSmem(unsigned char* smem) {
    using Ly = BackwardLayout<D>;
    qs = reinterpret_cast<bf16*>(smem + Ly::q), ks = reinterpret_cast<bf16*>(smem + Ly::k);
    vs = reinterpret_cast<bf16*>(smem + Ly::v), dos = reinterpret_cast<bf16*>(smem + Ly::dO);
    db = reinterpret_cast<bf16*>(smem + Ly::db), x = reinterpret_cast<bf16*>(smem + Ly::x);
    ab = reinterpret_cast<bf16*>(smem + Ly::ab);
    bs = reinterpret_cast<float*>(smem + Ly::b), dm = reinterpret_cast<float*>(smem + Ly::dm);
    acc = reinterpret_cast<float*>(smem + Ly::acc), as = reinterpret_cast<float*>(smem + Ly::as);
    red = reinterpret_cast<float*>(smem + Ly::red);
  }
};

struct BackwardArgs {
  const bf16 *grad_o, *q, *k, *v;
  const float *g1, *g2, *gamma;
  const float *states, *dstates;  // S_n and dH_n, [B, H, NS, N, D, D]
  bf16* dq;
  float *dk_heads, *dv_heads;  // [B, T, H, D]
  float *dg1, *dg2;
  float* chunk_totals;  // [B, H, NS, N, D]
  float* dgamma_parts;  // [B, H, N]
  int64_t T_len;
  int H, Hk, N;
};

template <int D>
__device__ __forceinline__ void load_backward_chunk(const BackwardSmem<D>& m, const BackwardArgs& a, int64_t b,
                                                    int64_t t0, int L, int h, int hk) {
  load_rows<D>(m.qs, a.q, b, t0, L, a.T_len, a.H, h);
  load_rows<D>(m.ks, a.k, b, t0, L, a.T_len, a.Hk, hk);
  load_rows<D>(m.vs, a.v, b, t0, L, a.T_len, a.Hk, hk);
  load_rows<D>(m.dos, a.grad_o, b, t0, L, a.T_len, a.H, h);
  __syncthreads();
  block_product<RowM, ColM>(kChunk, kChunk, D, m.dos, ldb<D>(), m.vs, ldb<D>(), m.dm, kLdScoreF, false);
  __syncthreads();
  for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += kThreads) {
    const int t = idx / kChunk, j = idx % kChunk;
    m.db[t * kLdScoreB + j] = __float2bfloat16_rn(j <= t ? m.dm[t * kLdScoreF + j] : 0.0f);
  }
}

// dq, and w q dq' parked in dg_s for the dk kernel.
template <int D, bool TWO>
__global__ void __launch_bounds__(kThreads) backward_dq_kernel(BackwardArgs a) {
  using St = Strides<D>;
  constexpr int NS = TWO ? 2 : 1, LB = St::LB, LF = St::LF, NE = St::NE;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardSmem<D> m(smem);
  bf16 *sb = m.x, *kt = m.x;  // the state, then the key factors
  const int n = blockIdx.x, h = blockIdx.y, hk = h / (a.H / a.Hk);
  const int64_t b = blockIdx.z, t0 = int64_t(n) * kChunk;
  const int L = chunk_rows(t0, a.T_len);
  const float scale = rsqrtf(float(D));
  load_backward_chunk<D>(m, a, b, t0, L, h, hk);
  float total[NE];
#pragma unroll
  for (int i = 0; i < NE; ++i) total[i] = 0.0f;
#pragma unroll 1  // one state at a time keeps the per-state registers once
  for (int s = 0; s < NS; ++s) {
    const float w = TWO ? (s == 0 ? a.gamma[h] : 1.0f - a.gamma[h]) : 1.0f;
    const int64_t slot = ((b * a.H + h) * NS + s) * a.N + n;
    float* dg = s == 0 ? a.dg1 : a.dg2;
    __syncthreads();
    load_cumulative_gates<D>(m.bs, s == 0 ? a.g1 : a.g2, b, t0, L, a.T_len, a.H, h);
    load_state<D>(sb, a.states + slot * D * D);
    __syncthreads();
    block_product<RowM, ColM>(kChunk, D, D, m.dos, LB, sb, LB, m.acc, LF, false);  // do S^T
    __syncthreads();
    float dqs[NE];
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads, t = idx / D, c = idx % D;
      dqs[i] = exp2f(m.bs[t * LF + c]) * m.acc[t * LF + c];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kFactorRows * D; i += kThreads) {
      const int r = i / D, c = i % D, I = r < 16 ? 1 : r < 48 ? 2 : 3, j = r - key_rows_offset(I);
      kt[r * LB + c] = __float2bfloat16_rn(bf(m.ks[j * LB + c]) * exp2f(m.bs[16 * I * LF + c] - m.bs[j * LF + c]));
    }
    __syncthreads();
    for (int tile = threadIdx.x / 32; tile < 3 * (D / 16); tile += kWarps) {
      const int I = 1 + tile / (D / 16), j0 = tile % (D / 16) * 16;
      tile_product<RowM, RowM>(0, j0, 16 * I, m.db + 16 * I * kLdScoreB, kLdScoreB, kt + key_rows_offset(I) * LB, LB,
                               m.acc + 16 * I * LF, LF, false);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads, t = idx / D, c = idx % D, I = t / 16;
      const float bt = m.bs[t * LF + c];
      float intra = I > 0 ? exp2f(bt - m.bs[16 * I * LF + c]) * m.acc[t * LF + c] : 0.0f;
      for (int j = 16 * I; j <= t; ++j) intra += m.dm[t * kLdScoreF + j] * bf(m.ks[j * LB + c]) * exp2f(bt - m.bs[j * LF + c]);
      const float d = scale * (dqs[i] + intra);
      total[i] += w * d;
      if (t < L) dg[((b * a.T_len + t0 + t) * a.H + h) * int64_t(D) + c] = w * bf(m.qs[t * LB + c]) * d;
    }
  }
#pragma unroll
  for (int i = 0; i < NE; ++i) {
    const int idx = threadIdx.x + i * kThreads, t = idx / D, c = idx % D;
    if (t < L) a.dq[((b * a.T_len + t0 + t) * a.H + h) * int64_t(D) + c] = __float2bfloat16_rn(total[i]);
  }
}

// dk (per query head, fp32), and the gate gradient within the chunk: dg_s <- suffix sums of the parked
// w q dq' minus w k dk', the chunk's total in chunk_totals.
template <int D, bool TWO>
__global__ void __launch_bounds__(kThreads) backward_dk_kernel(BackwardArgs a) {
  using St = Strides<D>;
  constexpr int NS = TWO ? 2 : 1, LB = St::LB, LF = St::LF, NE = St::NE;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardSmem<D> m(smem);
  bf16 *hb = m.x, *qr = m.x;  // the state gradient, then the query factors
  const int n = blockIdx.x, h = blockIdx.y, hk = h / (a.H / a.Hk);
  const int64_t b = blockIdx.z, t0 = int64_t(n) * kChunk;
  const int L = chunk_rows(t0, a.T_len);
  const float scale = rsqrtf(float(D));
  load_backward_chunk<D>(m, a, b, t0, L, h, hk);
  float total[NE];
#pragma unroll
  for (int i = 0; i < NE; ++i) total[i] = 0.0f;
#pragma unroll 1  // one state at a time keeps the per-state registers once
  for (int s = 0; s < NS; ++s) {
    const float w = TWO ? (s == 0 ? a.gamma[h] : 1.0f - a.gamma[h]) : 1.0f;
    const int64_t slot = ((b * a.H + h) * NS + s) * a.N + n;
    float* dg = s == 0 ? a.dg1 : a.dg2;
    __syncthreads();
    load_cumulative_gates<D>(m.bs, s == 0 ? a.g1 : a.g2, b, t0, L, a.T_len, a.H, h);
    load_state<D>(hb, a.dstates + slot * D * D);
    __syncthreads();
    block_product<RowM, ColM>(kChunk, D, D, m.vs, LB, hb, LB, m.acc, LF, false);  // v dH^T
    __syncthreads();
    float dks[NE];
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads, j = idx / D, c = idx % D;
      dks[i] = exp2f(m.bs[(kChunk - 1) * LF + c] - m.bs[j * LF + c]) * m.acc[j * LF + c];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kFactorRows * D; i += kThreads) {
      const int r = i / D, c = i % D, J = r < 48 ? 0 : r < 80 ? 1 : 2, ref = 16 * (J + 1);
      const int t = ref + r - query_rows_offset(J);
      qr[r * LB + c] = __float2bfloat16_rn(bf(m.qs[t * LB + c]) * exp2f(m.bs[t * LF + c] - m.bs[ref * LF + c]));
    }
    __syncthreads();
    for (int tile = threadIdx.x / 32; tile < 3 * (D / 16); tile += kWarps) {
      const int J = tile / (D / 16), j0 = tile % (D / 16) * 16;
      // D[16(J+1).., J-block]^T (column-major view) times Qr_J.
      tile_product<ColM, RowM>(0, j0, 48 - 16 * J, m.db + 16 * (J + 1) * kLdScoreB + 16 * J, kLdScoreB,
                               qr + query_rows_offset(J) * LB, LB, m.acc + 16 * J * LF, LF, false);
    }
    __syncthreads();
    float r[NE];
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads, j = idx / D, c = idx % D, J = j / 16;
      const float bj = m.bs[j * LF + c];
      float intra = J < 3 ? exp2f(m.bs[16 * (J + 1) * LF + c] - bj) * m.acc[j * LF + c] : 0.0f;
      for (int t = j; t < 16 * J + 16; ++t)
        intra += m.dm[t * kLdScoreF + j] * bf(m.qs[t * LB + c]) * exp2f(m.bs[t * LF + c] - bj);
      const float d = dks[i] + scale * intra;
      total[i] += w * d;
      r[i] = j < L ? dg[((b * a.T_len + t0 + j) * a.H + h) * int64_t(D) + c] - w * bf(m.ks[j * LB + c]) * d : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      m.acc[idx / D * LF + idx % D] = r[i];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < D; c += kThreads) {
      float run = 0.0f;
      for (int t = kChunk - 1; t >= 0; --t) {
        run += m.acc[t * LF + c];
        if (t < L) dg[((b * a.T_len + t0 + t) * a.H + h) * int64_t(D) + c] = run;
      }
      a.chunk_totals[slot * D + c] = run;
    }
  }
#pragma unroll
  for (int i = 0; i < NE; ++i) {
    const int idx = threadIdx.x + i * kThreads, t = idx / D, c = idx % D;
    if (t < L) a.dk_heads[((b * a.T_len + t0 + t) * a.H + h) * int64_t(D) + c] = total[i];
  }
}

// dv (per query head, fp32) and the chunk's part of dgamma.
template <int D, bool TWO>
__global__ void __launch_bounds__(kThreads) backward_dv_kernel(BackwardArgs a) {
  using St = Strides<D>;
  constexpr int NS = TWO ? 2 : 1, LB = St::LB, LF = St::LF, NE = St::NE;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardSmem<D> m(smem);
  bf16 *qt = m.x, *kt = m.x + 48 * LB;          // score factors
  bf16 *kf = m.x, *hb = m.x + kChunk * LB;      // then k e^{b_L - b} and dH
  const int n = blockIdx.x, h = blockIdx.y, hk = h / (a.H / a.Hk);
  const int64_t b = blockIdx.z, t0 = int64_t(n) * kChunk;
  const int L = chunk_rows(t0, a.T_len);
  const float scale = rsqrtf(float(D));
  load_backward_chunk<D>(m, a, b, t0, L, h, hk);
  float total[NE], gam = 0.0f;
#pragma unroll
  for (int i = 0; i < NE; ++i) total[i] = 0.0f;
#pragma unroll 1  // one state at a time keeps the per-state registers once
  for (int s = 0; s < NS; ++s) {
    const float w = TWO ? (s == 0 ? a.gamma[h] : 1.0f - a.gamma[h]) : 1.0f;
    const int64_t slot = ((b * a.H + h) * NS + s) * a.N + n;
    __syncthreads();
    load_cumulative_gates<D>(m.bs, s == 0 ? a.g1 : a.g2, b, t0, L, a.T_len, a.H, h);
    build_score_factors<D>(qt, kt, m.qs, m.ks, m.bs);
    __syncthreads();
    chunk_scores<D>(m.as, qt, kt, m.qs, m.ks, m.bs);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += kThreads) {
      const int t = idx / kChunk, j = idx % kChunk;
      m.ab[t * kLdScoreB + j] = __float2bfloat16_rn(j <= t ? scale * m.as[t * kLdScoreF + j] : 0.0f);
    }
    for (int i = threadIdx.x; i < kChunk * D; i += kThreads) {
      const int j = i / D, c = i % D;
      kf[j * LB + c] = __float2bfloat16_rn(bf(m.ks[j * LB + c]) *
                                           exp2f(m.bs[(kChunk - 1) * LF + c] - m.bs[j * LF + c]));
    }
    load_state<D>(hb, a.dstates + slot * D * D);
    __syncthreads();
    block_product<ColM, RowM>(kChunk, D, kChunk, m.ab, kLdScoreB, m.dos, LB, m.acc, LF, false);  // scale A^T do
    __syncthreads();
    block_product<RowM, RowM>(kChunk, D, D, kf, LB, hb, LB, m.acc, LF, true);  // + (k e^{b_L - b}) dH
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads, j = idx / D, e = idx % D;
      const float d = m.acc[j * LF + e];
      total[i] += w * d;
      if (TWO) gam += (s == 0 ? d : -d) * bf(m.vs[j * LB + e]);
    }
  }
#pragma unroll
  for (int i = 0; i < NE; ++i) {
    const int idx = threadIdx.x + i * kThreads, t = idx / D, c = idx % D;
    if (t < L) a.dv_heads[((b * a.T_len + t0 + t) * a.H + h) * int64_t(D) + c] = total[i];
  }
  if (TWO) {
    const float sum = block_sum(gam, m.red);
    if (threadIdx.x == 0) a.dgamma_parts[(b * a.H + h) * a.N + n] = sum;
  }
}

// chunk_totals[.., n, c] <- the sum over later chunks (exclusive suffix), per (b, h, s, c).
__global__ void chunk_suffix_kernel(float* __restrict__ totals, int64_t lines, int N, int D) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= lines) return;
  float* col = totals + i / D * int64_t(N) * D + i % D;
  float run = 0.0f;
  for (int n = N - 1; n >= 0; --n) {
    const float x = col[int64_t(n) * D];
    col[int64_t(n) * D] = run;
    run += x;
  }
}

// dg_s[b, t, h, c] += the later chunks' total.
__global__ void add_chunk_suffix_kernel(float* __restrict__ dg, const float* __restrict__ offsets, int s, int NS,
                                        int64_t T_len, int H, int D, int N, int64_t n_elems) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_elems; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % D), h = int(i / D % H);
    const int64_t t = i / (int64_t(D) * H) % T_len, b = i / (int64_t(D) * H * T_len);
    dg[i] += offsets[(((b * H + h) * NS + s) * N + t / kChunk) * D + c];
  }
}

// dk, dv [B, T, Hk, D] (bf16) = the sums of the per-query-head fp32 gradients over each KV head's group.
__global__ void reduce_group_kernel(const float* __restrict__ dk_heads, const float* __restrict__ dv_heads,
                                    bf16* __restrict__ dk, bf16* __restrict__ dv, int64_t rows, int Hk, int G, int D) {
  const int64_t n = rows * Hk * D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (int64_t(Hk) * D);
    const int hk = int(i / D % Hk), e = int(i % D);
    float sk = 0.0f, sv = 0.0f;
    for (int g = 0; g < G; ++g) {
      const int64_t src = (r * Hk * G + int64_t(hk) * G + g) * D + e;
      sk += dk_heads[src];
      sv += dv_heads[src];
    }
    dk[i] = __float2bfloat16_rn(sk);
    dv[i] = __float2bfloat16_rn(sv);
  }
}

__global__ void reduce_dgamma_kernel(const float* __restrict__ parts, float* __restrict__ dgamma, int64_t B, int H,
                                     int N) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= H) return;
  float s = 0.0f;
  for (int64_t b = 0; b < B; ++b)
    for (int n = 0; n < N; ++n) s += parts[(b * H + h) * N + n];
  dgamma[h] = s;
}

template <typename K>
void set_smem(K kernel, size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

const bf16* bf16_data(const Tensor& t) { return static_cast<const bf16*>(t.raw()); }
const float* f32_data(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw()) : nullptr; }

constexpr size_t contributions_bytes(int D) { return size_t(5 * kChunk * (D + 8) * 2 + kChunk * (D + 4) * 4); }

template <int D, bool TWO, bool KEYS>
void launch_contributions(const Tensor& x, const Tensor& y, const Tensor& g1, const Tensor& g2, Tensor& states,
                          Tensor& totals, int64_t B, int64_t T_len, int H, int Hk, int N, cudaStream_t stream) {
  auto kernel = chunk_contributions_kernel<D, TWO, KEYS>;
  set_smem(kernel, contributions_bytes(D));
  kernel<<<dim3(unsigned(N), unsigned(H), unsigned(B)), kThreads, contributions_bytes(D), stream>>>(
      bf16_data(x), bf16_data(y), f32_data(g1), TWO ? f32_data(g2) : nullptr, static_cast<float*>(states.raw()),
      static_cast<float*>(totals.raw()), T_len, H, Hk, N);
  CUDA_CHECK_LAUNCH();
}

void launch_scan(Tensor& states, const Tensor& totals, const float* i1, const float* i2, float* f1, float* f2,
                 int64_t BH, int NS, int N, int D, bool reverse, cudaStream_t stream) {
  const int64_t n = BH * NS * int64_t(D) * D;
  state_scan_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(static_cast<float*>(states.raw()),
                                                                   static_cast<const float*>(totals.raw()), i1, i2, f1,
                                                                   f2, BH, NS, N, D, reverse);
  CUDA_CHECK_LAUNCH();
}

template <int D, bool TWO>
void forward_tc(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                const Tensor& gamma, const DslaState& initial, DslaForward& out) {
  constexpr int NS = TWO ? 2 : 1;
  const int64_t B = q.dim(0), T_len = q.dim(1);
  const int H = int(q.dim(2)), Hk = int(k.dim(2)), N = int((T_len + kChunk - 1) / kChunk);
  const Device device = q.device();
  cudaStream_t stream = stream_for(device);
  Tensor states = Tensor::empty({B, H, NS, N, D, D}, DType::f32, device);
  Tensor totals = Tensor::empty({B, H, NS, N, D}, DType::f32, device);
  launch_contributions<D, TWO, true>(k, v, g1, g2, states, totals, B, T_len, H, Hk, N, stream);
  launch_scan(states, totals, f32_data(initial.s1), TWO ? f32_data(initial.s2) : nullptr,
              optional_data(out.final_state.s1), TWO ? optional_data(out.final_state.s2) : nullptr, B * H, NS, N, D,
              false, stream);
  auto kernel = forward_output_kernel<D, TWO>;
  const size_t smem = ForwardOutLayout<D>::bytes;
  set_smem(kernel, smem);
  kernel<<<dim3(unsigned(N), unsigned(H), unsigned(B)), kThreads, smem, stream>>>(
      bf16_data(q), bf16_data(k), bf16_data(v), f32_data(g1), TWO ? f32_data(g2) : nullptr, f32_data(gamma),
      static_cast<const float*>(states.raw()), static_cast<bf16*>(out.o.raw()), T_len, H, Hk, N);
  CUDA_CHECK_LAUNCH();
}

template <int D, bool TWO>
void backward_tc(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                 const Tensor& g2, const Tensor& gamma, DslaGrads& grads) {
  constexpr int NS = TWO ? 2 : 1;
  const int64_t B = q.dim(0), T_len = q.dim(1);
  const int H = int(q.dim(2)), Hk = int(k.dim(2)), N = int((T_len + kChunk - 1) / kChunk);
  const Device device = q.device();
  cudaStream_t stream = stream_for(device);
  Tensor states = Tensor::empty({B, H, NS, N, D, D}, DType::f32, device);
  Tensor dstates = Tensor::empty({B, H, NS, N, D, D}, DType::f32, device);
  Tensor totals = Tensor::empty({B, H, NS, N, D}, DType::f32, device);
  Tensor chunk_totals = Tensor::empty({B, H, NS, N, D}, DType::f32, device);
  Tensor dk_heads = Tensor::empty(q.shape(), DType::f32, device), dv_heads = Tensor::empty(q.shape(), DType::f32, device);
  Tensor dgamma_parts = Tensor::empty({B, H, N}, DType::f32, device);
  launch_contributions<D, TWO, true>(k, v, g1, g2, states, totals, B, T_len, H, Hk, N, stream);
  launch_contributions<D, TWO, false>(q, grad_o, g1, g2, dstates, totals, B, T_len, H, Hk, N, stream);
  launch_scan(states, totals, nullptr, nullptr, nullptr, nullptr, B * H, NS, N, D, false, stream);
  launch_scan(dstates, totals, nullptr, nullptr, nullptr, nullptr, B * H, NS, N, D, true, stream);
  BackwardArgs args{bf16_data(grad_o), bf16_data(q), bf16_data(k), bf16_data(v), f32_data(g1),
                    TWO ? f32_data(g2) : nullptr, f32_data(gamma), static_cast<const float*>(states.raw()),
                    static_cast<const float*>(dstates.raw()), static_cast<bf16*>(grads.dq.raw()),
                    static_cast<float*>(dk_heads.raw()), static_cast<float*>(dv_heads.raw()),
                    static_cast<float*>(grads.dg1.raw()), optional_data(grads.dg2),
                    static_cast<float*>(chunk_totals.raw()), static_cast<float*>(dgamma_parts.raw()), T_len, H, Hk, N};
  const size_t smem = BackwardLayout<D>::bytes;
  const dim3 grid{unsigned(N), unsigned(H), unsigned(B)};
  using Kernel = void (*)(BackwardArgs);
  const Kernel kernels[] = {backward_dq_kernel<D, TWO>, backward_dk_kernel<D, TWO>, backward_dv_kernel<D, TWO>};
  for (Kernel kernel : kernels) {
    set_smem(kernel, smem);
    kernel<<<grid, kThreads, smem, stream>>>(args);
    CUDA_CHECK_LAUNCH();
  }
  const int64_t lines = B * H * NS * int64_t(D);
  chunk_suffix_kernel<<<unsigned((lines + 255) / 256), 256, 0, stream>>>(static_cast<float*>(chunk_totals.raw()),
                                                                       lines, N, D);
  CUDA_CHECK_LAUNCH();
  const int64_t elems = q.numel();
  for (int s = 0; s < NS; ++s) {
    add_chunk_suffix_kernel<<<grid_for(elems, 256), 256, 0, stream>>>(
        static_cast<float*>((s == 0 ? grads.dg1 : grads.dg2).raw()), static_cast<const float*>(chunk_totals.raw()), s,
        NS, T_len, H, D, N, elems);
    CUDA_CHECK_LAUNCH();
  }
  const int64_t kv = B * T_len * Hk * int64_t(D);
  reduce_group_kernel<<<grid_for(kv, 256), 256, 0, stream>>>(
      static_cast<const float*>(dk_heads.raw()), static_cast<const float*>(dv_heads.raw()),
      static_cast<bf16*>(grads.dk.raw()), static_cast<bf16*>(grads.dv.raw()), B * T_len, Hk, H / Hk, D);
  CUDA_CHECK_LAUNCH();
  if (TWO) {
    reduce_dgamma_kernel<<<unsigned((H + 127) / 128), 128, 0, stream>>>(
        static_cast<const float*>(dgamma_parts.raw()), static_cast<float*>(grads.dgamma.raw()), B, H, N);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

bool dsla_tensor_core_applies(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) return false;
  return (*tensors.begin())->dtype() == DType::bf16;
}

void dsla_tensor_core_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                              const Tensor& gamma, const DslaState& initial, DslaForward& out) {
  dispatch_dsla_shape(q.dim(3), g2.defined(),
                      [&]<int D, bool TWO>() { forward_tc<D, TWO>(q, k, v, g1, g2, gamma, initial, out); });
}

void dsla_tensor_core_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& g1, const Tensor& g2, const Tensor& gamma, DslaGrads& grads) {
  dispatch_dsla_shape(q.dim(3), g2.defined(),
                      [&]<int D, bool TWO>() { backward_tc<D, TWO>(grad_o, q, k, v, g1, g2, gamma, grads); });
}

}  // namespace fathom::cuda
