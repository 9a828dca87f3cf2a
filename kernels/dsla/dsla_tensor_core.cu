// Tensor-core DSLA training kernels (bf16 q, k, v, do; fp32 gates, states and accumulation), chunks of 64.
// Both states are handled by every block from one load of its chunk's q, k, v (and do); only the gates
// and states differ. Two steps:
//   1. the chunks' starting states S_n (forward order, from the initial state) and state gradients dH_n
//      (reverse order, from zero), stored in bf16, the form in which the tensor cores read them: one
//      sequential pass each over the chunks, the state in registers (dsla_state_pass.cu);
//   2. per chunk, in parallel: the outputs and kept scores (forward, here, with the intra-chunk terms as in
//      dsla_tensor_core.cuh), or (backward) dq, dk and the gate gradients (dsla_query_key_grads.cu) and dv
//      and dgamma (dsla_value_grads.cu), each reading the chunk once for both states.
// Backward, per state with unweighted output gradient (w_1 = gamma, w_2 = 1 - gamma weigh them after):
//   dq' = scale (e^{b} (do S^T) + sum_j D_tj k_j e^{b_t - b_j}),  D = do v^T
//   dk' = scale sum_t D_tj q_t e^{b_t - b_j} + e^{b_L - b_j} (v dH^T)
//   dv' = scale A^T do + (k e^{b_L - b}) dH
//   dg  = w suffix sums of (q dq' - k dk') (the later chunks' share from the reverse state pass),
//   dgamma = sum v . (dv'_1 - dv'_2) (= sum do . (o_1 - o_2), as o is linear in v from a zero state).
// Sums across blocks run in a fixed order: bit-identical runs.
#include <algorithm>

#include "kernels/dsla/dsla_launch.h"
#include "kernels/dsla/dsla_reduce.cuh"
#include "kernels/dsla/dsla_tensor_core.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using namespace dsla_tc;

using RowM = wm::row_major;
using ColM = wm::col_major;

static_assert(kWarps == 16, "chunk_scores splits the block into 6 warps of tiles and 10 of exact diagonals");

// The six sub-block pairs (I, J), J < I, of a chunk's off-diagonal scores.
__constant__ int kPairI[6] = {1, 2, 2, 3, 3, 3};
__constant__ int kPairJ[6] = {0, 0, 1, 0, 1, 2};
// The ten 4 x 4 tiles (I, J), J <= I, of a 16 x 16 diagonal sub-block's lower triangle.
__constant__ int kTileI[10] = {0, 1, 1, 2, 2, 2, 3, 3, 3, 3};
__constant__ int kTileJ[10] = {0, 0, 1, 0, 1, 2, 0, 1, 2, 3};

template <int D>
struct Strides {
  static constexpr int LB = ldb<D>(), LF = ldf<D>(), NE = kChunk * D / kThreads;
  static constexpr int rows_bytes = kChunk * LB * 2;   // bf16 [64][LB]
  static constexpr int gates_bytes = kChunk * LF * 4;  // fp32 [64][LF]
  static constexpr int score_f_bytes = kChunk * kLdScoreF * 4, score_b_bytes = kChunk * kLdScoreB * 2;
  static constexpr int scratch_bytes = kThreads * 4;  // ColumnScan's exchange, block_sum's
  __host__ __device__ static constexpr int bf16_rows(int rows) { return rows * LB * 2; }
};

__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }

// Four bf16 at p (8-byte aligned) as floats; four floats at p (16-byte aligned).
__device__ __forceinline__ void load4(float (&x)[4], const bf16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  x[0] = a.x, x[1] = a.y, x[2] = c.x, x[3] = c.y;
}
__device__ __forceinline__ void load4(float (&x)[4], const float* p) {
  const float4 u = *reinterpret_cast<const float4*>(p);
  x[0] = u.x, x[1] = u.y, x[2] = u.z, x[3] = u.w;
}

// The chunk's position: block (n, h, b) of the grid (chunks, query heads, batch).
struct ChunkPos {
  int n, h, hk, L;
  int64_t b, t0;
  __device__ ChunkPos(int64_t T_len, int H, int Hk)
      : n(blockIdx.x), h(blockIdx.y), hk(blockIdx.y / (H / Hk)), L(0), b(blockIdx.z), t0(int64_t(blockIdx.x) * kChunk) {
    L = chunk_rows(t0, T_len);
  }
  // Element (t, c) of a [B, T, heads, D] tensor at this chunk's row t.
  __device__ int64_t at(int t, int c, int64_t T_len, int heads, int head, int D) const {
    return ((b * T_len + t0 + t) * heads + head) * int64_t(D) + c;
  }
  // The chunk's row 0 of `head` in a [B, T, heads, D] tensor; row t, column c is at t heads D + c from it.
  template <typename T>
  __device__ T* first_row(T* x, int64_t T_len, int heads, int head, int D) const {
    return x + at(0, 0, T_len, heads, head, D);
  }
};

// For each state s: a barrier (the previous state's work is done with the block's buffers), its
// cumulative gates into bs, then f(s, w, slot) with the state's weight w (1 without gamma) and its
// [.., NS, N] slot.
template <int D, bool TWO, typename F>
__device__ __forceinline__ void for_each_state(const ChunkPos& p, float* bs, float* scratch, const float* g1,
                                               const float* g2, const float* gamma, int64_t T_len, int H, int N,
                                               F&& f) {
  constexpr int NS = TWO ? 2 : 1;
#pragma unroll 1  // one state at a time keeps the per-state registers once
  for (int s = 0; s < NS; ++s) {
    const float w = TWO && gamma != nullptr ? (s == 0 ? gamma[p.h] : 1.0f - gamma[p.h]) : 1.0f;
    const int64_t slot = ((p.b * H + p.h) * NS + s) * N + p.n;
    __syncthreads();
    load_cumulative_gates<D>(bs, scratch, s == 0 ? g1 : g2, p.b, p.t0, p.L, T_len, H, p.h);
    f(s, w, slot);
  }
}

// Kt (k_j e^{b_16I - b_j}, j < 16 I, rows from key_rows_offset(I)): the key factors of the off-diagonal
// scores.
template <int D>
__device__ __forceinline__ void build_key_factors(bf16* kt, const bf16* ks, const float* bs) {
  constexpr int LB = ldb<D>(), LF = ldf<D>();
  for (int i = threadIdx.x; i < kFactorRows * D; i += kThreads) {
    const int r = i / D, c = i % D, I = r < 16 ? 1 : r < 48 ? 2 : 3, j = r - key_rows_offset(I);
    kt[r * LB + c] = __float2bfloat16_rn(bf(ks[j * LB + c]) * exp2f(bs[16 * I * LF + c] - bs[j * LF + c]));
  }
}
// Qt (q_t e^{b_t - b_16I} for rows t >= 16, row t - 16) and Kt: the factor operands of the off-diagonal
// scores.
template <int D>
__device__ __forceinline__ void build_score_factors(bf16* qt, bf16* kt, const bf16* qs, const bf16* ks,
                                                    const float* bs) {
  constexpr int LB = ldb<D>(), LF = ldf<D>();
  for (int i = threadIdx.x; i < 48 * D; i += kThreads) {
    const int r = i / D, c = i % D, t = 16 + r, ref = t / 16 * 16;
    qt[r * LB + c] = __float2bfloat16_rn(bf(qs[t * LB + c]) * exp2f(bs[t * LF + c] - bs[ref * LF + c]));
  }
  build_key_factors<D>(kt, ks, bs);
}

// The exact diagonal sub-blocks of the scores, by warps 6..15: each of the 4 x 10 lower-triangle 4 x 4
// tiles is summed by 8 threads over interleaved groups of 4 columns c (registers hold the tile's rows),
// then reduced across them by shuffles. Entries above the diagonal are left unwritten.
template <int D>
__device__ __forceinline__ void diagonal_scores(float* as, const bf16* qs, const bf16* ks, const float* bs) {
  constexpr int LB = ldb<D>(), LF = ldf<D>(), kSlices = 8, kGroups = D / 4 / kSlices;
  const int d = threadIdx.x - 6 * 32, slice = d % kSlices, tile = d / kSlices, sub = tile / 10;
  const int t0 = 16 * sub + 4 * kTileI[tile % 10], j0 = 16 * sub + 4 * kTileJ[tile % 10];
  float a[4][4] = {};
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
    const int c = (grp * kSlices + slice) * 4;
    float q[4][4], bq[4][4], k[4][4], bk[4][4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      load4(q[u], qs + (t0 + u) * LB + c);
      load4(bq[u], bs + (t0 + u) * LF + c);
      load4(k[u], ks + (j0 + u) * LB + c);
      load4(bk[u], bs + (j0 + u) * LF + c);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int e = 0; e < 4; ++e)
#pragma unroll
        for (int x = 0; x < 4; ++x) a[u][e] += q[u][x] * k[e][x] * exp2f(bq[u][x] - bk[e][x]);
  }
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
#pragma unroll
      for (int m = 1; m < kSlices; m <<= 1) a[u][e] += __shfl_xor_sync(0xffffffffu, a[u][e], m);
      if ((u * 4 + e) / 2 == slice && j0 + e <= t0 + u) as[(t0 + u) * kLdScoreF + j0 + e] = a[u][e];
    }
}

// A[t][j] = sum_c q_tc k_jc e^{b_tc - b_jc} for j <= t into as (fp32 [64][kLdScoreF]; entries above the
// diagonal are left unwritten): warps 0..5 take the off-diagonal tiles, warps 6..15 the exact diagonal.
template <int D>
__device__ __forceinline__ void chunk_scores(float* as, const bf16* qt, const bf16* kt, const bf16* qs, const bf16* ks,
                                             const float* bs) {
  constexpr int LB = ldb<D>();
  const int warp = threadIdx.x / 32;
  if (warp < 6) {
    const int I = kPairI[warp], J = kPairJ[warp];
    tile_product<RowM, ColM>(0, 0, D, qt + 16 * (I - 1) * LB, LB, kt + (key_rows_offset(I) + 16 * J) * LB, LB,
                             as + 16 * I * kLdScoreF + 16 * J, kLdScoreF, false);
  } else {
    diagonal_scores<D>(as, qs, ks, bs);
  }
}

// The chunk's scaled scores scale A (bf16 [64][kLdScoreB] in shared memory, zeros above the diagonal) to
// their [64][64] slot in global memory: the forward keeps them for the dv kernel.
__device__ __forceinline__ void store_scores(bf16* dst, const bf16* ab) {
  for (int i = threadIdx.x; i < kChunk * kChunk / 8; i += kThreads)
    *reinterpret_cast<uint4*>(dst + i * 8) = *reinterpret_cast<const uint4*>(ab + i / 8 * kLdScoreB + i % 8 * 8);
}

// ---------------------------------------------------------------------------------------------------
// Forward outputs: o = sum_s w_s ((scale q e^{b}) S_n + (scale A) v), the bf16 scale A kept in `scores`
// where not null.
template <int D>
struct ForwardOutLayout {
  using St = Strides<D>;
  static constexpr int x_rows = 64 + D > 144 ? 64 + D : 144;
  static constexpr int q = 0, k = q + St::rows_bytes, v = k + St::rows_bytes, b = v + St::rows_bytes,
                       x = b + St::gates_bytes, acc = x + St::bf16_rows(x_rows), as = acc + St::gates_bytes,
                       ab = as + St::score_f_bytes, scratch = ab + St::score_b_bytes,
                       bytes = scratch + St::scratch_bytes;
};

template <int D, bool TWO>
__global__ void __launch_bounds__(kThreads)
    forward_output_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                          const float* __restrict__ g1, const float* __restrict__ g2, const float* __restrict__ gamma,
                          const bf16* __restrict__ states, bf16* __restrict__ o, bf16* __restrict__ scores,
                          int64_t T_len, int H, int Hk, int N) {
  using St = Strides<D>;
  using Ly = ForwardOutLayout<D>;
  constexpr int LB = St::LB, LF = St::LF, NE = St::NE;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *qs = reinterpret_cast<bf16*>(smem + Ly::q), *ks = reinterpret_cast<bf16*>(smem + Ly::k),
       *vs = reinterpret_cast<bf16*>(smem + Ly::v);
  float* bs = reinterpret_cast<float*>(smem + Ly::b);
  bf16 *qh = reinterpret_cast<bf16*>(smem + Ly::x), *sb = qh + kChunk * LB;  // phase 1
  bf16 *qt = qh, *kt = qh + 48 * LB;                                         // phase 2
  float *acc = reinterpret_cast<float*>(smem + Ly::acc), *as = reinterpret_cast<float*>(smem + Ly::as);
  bf16* ab = reinterpret_cast<bf16*>(smem + Ly::ab);
  float* scratch = reinterpret_cast<float*>(smem + Ly::scratch);
  const ChunkPos p(T_len, H, Hk);
  const float scale = rsqrtf(float(D));
  load_rows<D>(qs, q, p.b, p.t0, p.L, T_len, H, p.h);
  load_rows<D>(ks, k, p.b, p.t0, p.L, T_len, Hk, p.hk);
  load_rows<D>(vs, v, p.b, p.t0, p.L, T_len, Hk, p.hk);
  float out[NE] = {};
  for_each_state<D, TWO>(p, bs, scratch, g1, g2, gamma, T_len, H, N, [&](int, float w, int64_t slot) {
    for (int i = threadIdx.x; i < kChunk * D; i += kThreads) {
      const int t = i / D, c = i % D;
      qh[t * LB + c] = __float2bfloat16_rn(scale * bf(qs[t * LB + c]) * exp2f(bs[t * LF + c]));
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
      ab[t * kLdScoreB + j] = __float2bfloat16_rn(j <= t ? scale * as[t * kLdScoreF + j] : 0.0f);
    }
    __syncthreads();
    if (scores != nullptr) store_scores(scores + slot * kChunk * kChunk, ab);
    block_product<RowM, RowM>(kChunk, D, kChunk, ab, kLdScoreB, vs, LB, acc, LF, true);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NE; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      out[i] += w * acc[idx / D * LF + idx % D];
    }
  });
#pragma unroll
  for (int i = 0; i < NE; ++i) {
    const int idx = threadIdx.x + i * kThreads, t = idx / D, c = idx % D;
    if (t < p.L) o[p.at(t, c, T_len, H, p.h, D)] = __float2bfloat16_rn(out[i]);
  }
}

template <typename K>
void set_smem(K kernel, size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// The outputs o and (where scores is defined) the kept scores, from the chunk starting states `starts`.
template <int D, bool TWO>
void launch_outputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                    const Tensor& gamma, const Tensor& starts, Tensor& o, Tensor& scores) {
  const int64_t B = q.dim(0), T_len = q.dim(1);
  const int H = int(q.dim(2)), Hk = int(k.dim(2)), N = int((T_len + kChunk - 1) / kChunk);
  auto kernel = forward_output_kernel<D, TWO>;
  const size_t smem = ForwardOutLayout<D>::bytes;
  set_smem(kernel, smem);
  kernel<<<dim3(unsigned(N), unsigned(H), unsigned(B)), kThreads, smem, stream_for(q.device())>>>(
      bf16_data(q), bf16_data(k), bf16_data(v), f32_data(g1), TWO ? f32_data(g2) : nullptr, f32_data(gamma),
      bf16_data(starts), static_cast<bf16*>(o.raw()), scores.defined() ? static_cast<bf16*>(scores.raw()) : nullptr,
      T_len, H, Hk, N);
  CUDA_CHECK_LAUNCH();
}

template <int D, bool TWO>
void forward_tc(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                const Tensor& gamma, const DslaState& initial, bool keep_scores, DslaForward& out) {
  constexpr int NS = TWO ? 2 : 1;
  const int64_t B = q.dim(0), T_len = q.dim(1), N = (T_len + kChunk - 1) / kChunk;
  Tensor starts = Tensor::empty({B, q.dim(2), NS, N, D, D}, DType::bf16, q.device());
  if (keep_scores) out.scores = Tensor::empty(dsla_scores_shape(q, TWO), DType::bf16, q.device());
  dsla_chunk_states({.keys = true,
                     .x = k,
                     .y = v,
                     .g1 = g1,
                     .g2 = g2,
                     .starts = starts,
                     .initial = &initial,
                     .final_state = &out.final_state});
  launch_outputs<D, TWO>(q, k, v, g1, g2, gamma, starts, out.o, out.scores);
}

template <int D, bool TWO>
void backward_tc(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1,
                 const Tensor& g2, const Tensor& gamma, const Tensor& scores, DslaGrads& grads) {
  constexpr int NS = TWO ? 2 : 1;
  const int64_t B = q.dim(0), T_len = q.dim(1);
  const int H = int(q.dim(2)), Hk = int(k.dim(2)), N = int((T_len + kChunk - 1) / kChunk);
  const bool grouped = H != Hk;
  const Device device = q.device();
  cudaStream_t stream = stream_for(device);
  Tensor states = Tensor::empty({B, H, NS, N, D, D}, DType::bf16, device);
  Tensor dstates = Tensor::empty({B, H, NS, N, D, D}, DType::bf16, device);
  Tensor later = Tensor::empty({B, H, NS, N, D}, DType::f32, device);
  Tensor dk_heads, dv_heads;
  if (grouped)
    dk_heads = Tensor::empty(q.shape(), DType::f32, device), dv_heads = Tensor::empty(q.shape(), DType::f32, device);
  Tensor dgamma_parts = Tensor::empty({B, H, N}, DType::f32, device);
  dsla_chunk_states({.keys = true, .x = k, .y = v, .g1 = g1, .g2 = g2, .starts = states});
  Tensor kept = scores;
  if (!kept.defined()) {  // the forward's, bit for bit: its output kernel again, o discarded
    kept = Tensor::empty(dsla_scores_shape(q, TWO), DType::bf16, device);
    Tensor o = Tensor::empty(q.shape(), DType::bf16, device);
    launch_outputs<D, TWO>(q, k, v, g1, g2, gamma, states, o, kept);
  }
  dsla_chunk_states(
      {.keys = false, .x = q, .y = grad_o, .g1 = g1, .g2 = g2, .starts = dstates, .states = &states, .later = &later});
  const DslaBackwardArgs args{bf16_data(grad_o),
                              bf16_data(q),
                              bf16_data(k),
                              bf16_data(v),
                              f32_data(g1),
                              TWO ? f32_data(g2) : nullptr,
                              f32_data(gamma),
                              bf16_data(states),
                              bf16_data(dstates),
                              bf16_data(kept),
                              static_cast<bf16*>(grads.dq.raw()),
                              static_cast<bf16*>(grads.dk.raw()),
                              static_cast<bf16*>(grads.dv.raw()),
                              grouped ? static_cast<float*>(dk_heads.raw()) : nullptr,
                              grouped ? static_cast<float*>(dv_heads.raw()) : nullptr,
                              static_cast<float*>(grads.dg1.raw()),
                              optional_data(grads.dg2),
                              static_cast<const float*>(later.raw()),
                              static_cast<float*>(dgamma_parts.raw()),
                              B,
                              T_len,
                              H,
                              Hk,
                              N,
                              D};
  dsla_query_key_grads(args, stream);
  dsla_value_grads(args, stream);
  if (grouped) {
    const int64_t kv = B * T_len * Hk * int64_t(D);
    dsla::reduce_kv_kernel<bf16><<<grid_for(kv, 256), 256, 0, stream>>>(
        static_cast<const float*>(dk_heads.raw()), static_cast<const float*>(dv_heads.raw()),
        static_cast<bf16*>(grads.dk.raw()), static_cast<bf16*>(grads.dv.raw()), B * T_len, Hk, H / Hk, D, 1, true);
    CUDA_CHECK_LAUNCH();
  }
  if (TWO) {
    dsla::reduce_dgamma_kernel<<<unsigned((H + 127) / 128), 128, 0, stream>>>(
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
                              const Tensor& gamma, const DslaState& initial, bool keep_scores, DslaForward& out) {
  dispatch_dsla_shape(q.dim(3), g2.defined(), [&]<int D, bool TWO>() {
    forward_tc<D, TWO>(q, k, v, g1, g2, gamma, initial, keep_scores, out);
  });
}

void dsla_tensor_core_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& g1, const Tensor& g2, const Tensor& gamma, const Tensor& scores,
                               DslaGrads& grads) {
  dispatch_dsla_shape(q.dim(3), g2.defined(),
                      [&]<int D, bool TWO>() { backward_tc<D, TWO>(grad_o, q, k, v, g1, g2, gamma, scores, grads); });
}

}  // namespace fathom::cuda
