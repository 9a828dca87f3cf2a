// Flash-attention backward, deterministic: every sum in a fixed order (no unordered atomics).
//
//   prepare: per query row, lse2 = lse * log2(e) and delta = rowsum(dO * O), into [B, Hq, Tpad]
//            scratch padded with lse2 = +inf (probabilities of rows past T vanish) and delta = 0.
//   dK/dV:   one CTA per (key block, batch, KV head); each warp owns 16 keys and loops over the G query
//            heads of its KV head and every query block that sees its keys, accumulating dK and dV
//            in registers (the group sum needs neither atomics nor a G-times scratch). When that grid
//            is too small to fill the GPU (short sequences, few KV heads) the G heads are split over
//            S CTAs whose fp32 partials are summed afterwards in a fixed order.
//   dQ:      one CTA per (query tile, batch, query head), walking the same causal KV blocks as the
//            forward pass and accumulating dQ in registers.
// With P = exp(S - lse), dP = dO V^T: dS = P * (dP - delta), dQ = scale dS K, dK = scale dS^T Q,
// dV = P^T dO. Both passes recompute P; dQ thereby costs three products more than an atomic
// accumulation would, the price of bit-identical gradients. The wgmma dK/dV pass with dQ
// (attention_backward_wgmma.cuh) adds dQ in the pass instead, in a fixed key-block order.
#pragma once
#include "kernels/attention/attention_forward.cuh"
#include "kernels/attention/backward_plan.h"

namespace fathom::cuda::flash {

// Device-side arguments of one backward call; shapes as in ForwardArgs.
struct BackwardArgs {
  const bf16_t* q;
  const bf16_t* k;
  const bf16_t* v;
  const bf16_t* o;
  const bf16_t* dout;
  const float* lse;
  bf16_t* dq;
  bf16_t* dk;
  bf16_t* dv;
  float* lse2;   // [B, Hq, Tpad] scratch
  float* delta;  // [B, Hq, Tpad] scratch
  int B, T, Tpad, Hq, Hk, G, d;
  float scale, scale_log2;
  // With the G query heads of a KV head split over S CTAs (gridDim.z = S > 1), each split writes its
  // fp32 dK and dV partial sums here, [S, B, T, Hk, d], and a reduction adds them in split order.
  float* dk_part = nullptr;
  float* dv_part = nullptr;
  // With dQ summed inside the dK/dV pass (attention_backward_wgmma.cuh): unscaled fp32 dQ rows
  // [B, Hq, Tpad, D] in slabs of 64 rows (dq_sum_index), per slab the count of key blocks already
  // added in, and the counter its CTAs draw their tickets from (draw_ticket).
  float* dq_acc = nullptr;
  int* dq_turn = nullptr;
  int* dq_ticket = nullptr;
};

// Where element (row, col) of the fp32 dQ sums lies (col even: col + 1 follows it), row counting the
// padded rows of [B, Hq, Tpad] and W being the rows' width. A slab of 64 rows is stored in the order a
// warpgroup's m64nW accumulator holds it: warp (16 rows), then 8-column group j, then row half, then
// lane, two floats each, so that the warps stage it without shared-memory bank conflicts.
// dq_slab_index: the same within one slab, r being the row's place in it (0..63).
template <int W>
__host__ __device__ __forceinline__ int dq_slab_index(int r, int col) {
  const int g = r & 7, half = (r >> 3) & 1, warp = r >> 4;
  const int j = col >> 3, t = (col & 7) >> 1;
  return (((warp * (W / 8) + j) * 2 + half) * 32 + g * 4 + t) * 2 + (col & 1);
}
template <int W>
__host__ __device__ __forceinline__ int64_t dq_sum_index(int64_t row, int col) {
  const int r = int(row % 64);
  return (row - r) * W + dq_slab_index<W>(r, col);
}

// A dK/dV CTA's key block, low key blocks first: they see the most queries. kv_off is the KV head's
// first row in [B, T, Hk, d]; strides step one token. The grid is (key block, batch x KV head, split).
// A pass that also forms dQ (IN_TURN, unsplit) hands the key blocks out by ticket, in the order of a
// (batch x KV head, key block) grid: a CTA draws its own when it starts, so every lower key block of its
// head, whose dQ additions it waits for, belongs to a CTA that started before it, whatever order the
// hardware launches CTAs in (draw_ticket).
struct KeyBlock {
  int k0, b, hk;
  int64_t q_stride, kv_stride, kv_off;
};
template <bool IN_TURN>
__device__ __forceinline__ KeyBlock key_block(const BackwardArgs& a, int BK, int ticket = 0) {
  const int heads = a.B * a.Hk;
  const int block = IN_TURN ? ticket / heads : int(blockIdx.x), bh = IN_TURN ? ticket % heads : int(blockIdx.y);
  KeyBlock kb;
  kb.k0 = block * BK;
  kb.b = bh / a.Hk;
  kb.hk = bh % a.Hk;
  kb.q_stride = int64_t(a.Hq) * a.d;
  kb.kv_stride = int64_t(a.Hk) * a.d;
  kb.kv_off = (int64_t(kb.b) * a.T * a.Hk + kb.hk) * a.d;
  return kb;
}

// The ticket of a CTA of a pass with dQ: thread 0 draws it from a.dq_ticket into `slot` in shared
// memory; every thread of the CTA calls this and gets it.
__device__ __forceinline__ int draw_ticket(const BackwardArgs& a, int* slot) {
  if (threadIdx.x == 0) *slot = atomicAdd(a.dq_ticket, 1);
  __syncthreads();
  return *slot;
}

// A dK/dV CTA's work items: (query head of this split's share of the KV head's G heads, query block)
// for the query blocks from the one holding the CTA's first key k0 on. Head by head, each from that
// block up; or, IN_TURN, from the last query block down, the heads of a block in turn, so that every
// key block of a head meets a query block at the same step of its walk.
template <bool IN_TURN>
struct DkDvItems {
  int h0, heads, i0, blocks, count, BQ;
  __device__ __forceinline__ int head(int item) const { return h0 + (IN_TURN ? item % heads : item / blocks); }
  __device__ __forceinline__ int q0(int item) const {
    return (IN_TURN ? i0 + blocks - 1 - item / heads : i0 + item % blocks) * BQ;
  }
};
template <bool IN_TURN>
__device__ __forceinline__ DkDvItems<IN_TURN> dkdv_items(const BackwardArgs& a, int k0, int hk, int BQ) {
  const int split = int(blockIdx.z), splits = int(gridDim.z);
  const int g0 = split * a.G / splits, g1 = (split + 1) * a.G / splits;
  const int i0 = k0 / BQ, blocks = (a.T + BQ - 1) / BQ - i0;
  return DkDvItems<IN_TURN>{hk * a.G + g0, g1 - g0, i0, blocks, (g1 - g0) * blocks, BQ};
}

// LANES (a power of two up to 32) lanes per (b, t, h) row; rows t in [T, Tpad) write the padding.
template <int LANES>
__global__ void __launch_bounds__(256) flash_backward_prepare_kernel(const BackwardArgs a) {
  static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "lanes per row: a power of two");
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / LANES;
  const int sub = threadIdx.x % LANES;
  const bool in_range = row < int64_t(a.B) * a.Tpad * a.Hq;
  const int h = int(row % a.Hq), t = int((row / a.Hq) % a.Tpad), b = int(row / (int64_t(a.Hq) * a.Tpad));
  const bool real = in_range && t < a.T;
  float acc = 0.f;
  if (real) {
    const int64_t base = ((int64_t(b) * a.T + t) * a.Hq + h) * a.d;
    for (int c = sub * 8; c < a.d; c += 8 * LANES) {
      const uint4 ov = *reinterpret_cast<const uint4*>(a.o + base + c);
      const uint4 gv = *reinterpret_cast<const uint4*>(a.dout + base + c);
      const __nv_bfloat162* op = reinterpret_cast<const __nv_bfloat162*>(&ov);
      const __nv_bfloat162* gp = reinterpret_cast<const __nv_bfloat162*>(&gv);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 of = __bfloat1622float2(op[i]), gf = __bfloat1622float2(gp[i]);
        acc = fmaf(of.x, gf.x, acc);
        acc = fmaf(of.y, gf.y, acc);
      }
    }
  }
  // Every lane takes part in the shuffles; the lanes of a row sum in a fixed tree.
#pragma unroll
  for (int off = LANES / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (in_range && sub == 0) {
    const int64_t i = (int64_t(b) * a.Hq + h) * a.Tpad + t;
    a.delta[i] = real ? acc : 0.f;
    a.lse2[i] = real ? a.lse[(int64_t(b) * a.Hq + h) * a.T + t] * kLog2e : INFINITY;
  }
}

// Copies n floats (n a multiple of 4, 16-byte aligned source) into shared memory.
template <int N, int THREADS>
__device__ __forceinline__ void load_row_vector_async(uint32_t dst, const float* src, int tid) {
  static_assert(N % 4 == 0, "whole 16-byte chunks");
#pragma unroll
  for (int it = 0; it < (N / 4 + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + tid;
    if (i < N / 4) cp_async_16(dst + uint32_t(i) * 16u, src + i * 4, true);
  }
}

// ---------------------------------------------------------------------------------------------
// dK / dV. WARPS warps of 16 keys make a key block of BK; query blocks of BQ rows (Q, dO, lse2, delta)
// are double-buffered. KV_IN_REGS keeps the warp's K and V fragments in registers (small D).
template <int D_, int WARPS_, int BQ_, bool KV_IN_REGS_, int MIN_BLOCKS_>
struct DkDvConfig {
  static constexpr int D = D_, WARPS = WARPS_, BQ = BQ_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr bool KV_IN_REGS = KV_IN_REGS_;
  static constexpr int THREADS = WARPS * 32, BK = WARPS * 16;
  static constexpr int kTileKV = BK * D * 2, kTileQ = BQ * D * 2;
  static constexpr int kStageBytes = 2 * kTileQ + 2 * BQ * 4;  // Q, dO, lse2, delta
  static constexpr int kSmemBytes = 2 * kTileKV + 2 * kStageBytes;
  static_assert(BQ % 16 == 0 && kRowPad % BQ == 0, "query blocks must tile the padded rows");
};

// acc = A B^T for the warp's 16 rows of A (fragment of k-step ks from afrag) and the BQ rows of the
// swizzled tile b, D wide: S^T = K Q^T and dP^T = V dO^T of a dK/dV warp.
template <int D, int BQ, class AFrag>
__device__ __forceinline__ void warp_rows_times_tile(float (&acc)[BQ / 8][4], const AFrag& afrag, uint32_t b,
                                                     int lane) {
  using Tile = SwizzledTile<D>;
#pragma unroll
  for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[4];
    afrag(a, ks);
#pragma unroll
    for (int np = 0; np < BQ / 16; ++np) {
      uint32_t bf[4];
      Tile::load_b(bf, b, np * 16, ks * 16, lane);
      mma_16816(acc[2 * np], a, bf[0], bf[1]);
      mma_16816(acc[2 * np + 1], a, bf[2], bf[3]);
    }
  }
}

// acc += X Y for X the warp's 16 x BQ fp32 accumulator (rounded to bf16 A fragments) and Y the BQ x D
// swizzled tile y: dV += P^T dO and dK += dS^T Q of a dK/dV warp.
template <int D, int BQ>
__device__ __forceinline__ void warp_accumulator_times_tile(float (&acc)[1][D / 8][4], const float (&x)[BQ / 8][4],
                                                            uint32_t y, int lane) {
  using Tile = SwizzledTile<D>;
#pragma unroll
  for (int ks = 0; ks < BQ / 16; ++ks) {
    const uint32_t xa[4] = {pack_bf16(x[2 * ks][0], x[2 * ks][1]), pack_bf16(x[2 * ks][2], x[2 * ks][3]),
                            pack_bf16(x[2 * ks + 1][0], x[2 * ks + 1][1]),
                            pack_bf16(x[2 * ks + 1][2], x[2 * ks + 1][3])};
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t yb[4];
      Tile::load_b_trans(yb, y, ks * 16, np * 16, lane);
      mma_16816(acc[0][2 * np], xa, yb[0], yb[1]);
      mma_16816(acc[0][2 * np + 1], xa, yb[2], yb[3]);
    }
  }
}

// One work item of a dK/dV warp that owns 16 keys (its K and V fragments of k-step ks from kfrag and
// vfrag): against BQ queries whose Q and dO are the tiles tq, tdo and whose lse2 and delta are the
// row vectors lse2, delta, it forms S^T = K Q^T, P^T = exp2(S^T - lse2) (0 where `masked_block` and
// hidden(half, col) says the thread's key of row half `half` does not see query col), dV += P^T dO,
// dP^T = V dO^T, dS^T = P^T (dP^T - delta) and dK += dS^T Q (unscaled).
template <int D, int BQ, class KFrag, class VFrag, class Hidden>
__device__ __forceinline__ void dkdv_warp_item(float (&dk)[1][D / 8][4], float (&dv)[1][D / 8][4], const KFrag& kfrag,
                                               const VFrag& vfrag, uint32_t tq, uint32_t tdo, const float* lse2,
                                               const float* delta, bool masked_block, const Hidden& hidden,
                                               float scale_log2, int lane) {
  const int t = lane & 3;
  // S^T = K Q^T for the warp's 16 keys x BQ queries.
  float p[BQ / 8][4];
  warp_rows_times_tile<D, BQ>(p, kfrag, tq, lane);
  // P^T, masked only in a block that needs it.
  split_by_mask(masked_block, [&](auto masked) {
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = nt * 8 + 2 * t + e;
        const float l2 = lse2[col];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float x = exp2_approx(p[nt][2 * half + e] * scale_log2 - l2);
          if (masked && hidden(half, col)) x = 0.f;
          p[nt][2 * half + e] = x;
        }
      }
  });
  // dV += P^T dO.
  warp_accumulator_times_tile<D, BQ>(dv, p, tdo, lane);
  // dP^T = V dO^T, then dS^T = P^T * (dP^T - delta).
  float ds[BQ / 8][4];
  warp_rows_times_tile<D, BQ>(ds, vfrag, tdo, lane);
#pragma unroll
  for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float dl = delta[nt * 8 + 2 * t + e];
      ds[nt][e] = p[nt][e] * (ds[nt][e] - dl);
      ds[nt][2 + e] = p[nt][2 + e] * (ds[nt][2 + e] - dl);
    }
  // dK += dS^T Q (scaled at the end).
  warp_accumulator_times_tile<D, BQ>(dk, ds, tq, lane);
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) flash_backward_dkdv_kernel(const BackwardArgs a) {
  constexpr int D = Cfg::D, BQ = Cfg::BQ, BK = Cfg::BK;
  using Tile = SwizzledTile<D>;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const auto [k0, b, hk, q_stride, kv_stride, kv_off] = key_block<false>(a, BK);

  const uint32_t sK = smem_addr(smem), sV = sK + Cfg::kTileKV, stages = sV + Cfg::kTileKV;
  auto sQ = [&](int s) { return stages + uint32_t(s * Cfg::kStageBytes); };
  auto sDO = [&](int s) { return sQ(s) + Cfg::kTileQ; };
  auto sRows = [&](int s) { return sDO(s) + Cfg::kTileQ; };  // lse2[BQ] then delta[BQ]
  const float* rows_base = reinterpret_cast<const float*>(smem + (2 * Cfg::kTileKV));

  const auto work = dkdv_items<false>(a, k0, hk, BQ);
  const int items = work.count, split = int(blockIdx.z), splits = int(gridDim.z);
  auto load_item = [&](int item, int s) {
    const int h = work.head(item), q0 = work.q0(item);
    const int64_t q_off = (int64_t(b) * a.T * a.Hq + h) * a.d, r_off = (int64_t(b) * a.Hq + h) * a.Tpad + q0;
    load_tile_async<D, BQ, Cfg::THREADS>(sQ(s), a.q + q_off, q_stride, q0, a.T, a.d, tid);
    load_tile_async<D, BQ, Cfg::THREADS>(sDO(s), a.dout + q_off, q_stride, q0, a.T, a.d, tid);
    load_row_vector_async<BQ, Cfg::THREADS>(sRows(s), a.lse2 + r_off, tid);
    load_row_vector_async<BQ, Cfg::THREADS>(sRows(s) + BQ * 4, a.delta + r_off, tid);
  };

  load_tile_async<D, BK, Cfg::THREADS>(sK, a.k + kv_off, kv_stride, k0, a.T, a.d, tid);
  load_tile_async<D, BK, Cfg::THREADS>(sV, a.v + kv_off, kv_stride, k0, a.T, a.d, tid);
  load_item(0, 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  const int wkey = warp * 16;  // this warp's first key within the block
  uint32_t kf[Cfg::KV_IN_REGS ? D / 16 : 1][4], vf[Cfg::KV_IN_REGS ? D / 16 : 1][4];
  if constexpr (Cfg::KV_IN_REGS) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      Tile::load_a(kf[ks], sK, wkey, ks * 16, lane);
      Tile::load_a(vf[ks], sV, wkey, ks * 16, lane);
    }
  }
  // The warp's K (or V) fragment of k-step ks, from registers or shared memory.
  auto frag = [&](uint32_t(&f)[4], const uint32_t(&held)[Cfg::KV_IN_REGS ? D / 16 : 1][4], uint32_t tile, int ks) {
    if constexpr (Cfg::KV_IN_REGS) {
#pragma unroll
      for (int e = 0; e < 4; ++e) f[e] = held[ks][e];
    } else {
      Tile::load_a(f, tile, wkey, ks * 16, lane);
    }
  };

  float dk[1][D / 8][4], dv[1][D / 8][4];  // one m-tile: the warp's 16 keys
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[0][nt][e] = dv[0][nt][e] = 0.f;

  const int key_lo = k0 + wkey + g;  // this thread's keys: key_lo and key_lo + 8
  for (int item = 0; item < items; ++item) {
    if (item + 1 < items) {
      load_item(item + 1, (item + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int s = item & 1, q0 = work.q0(item);
    const uint32_t tq = sQ(s), tdo = sDO(s);
    const float* lse2 = rows_base + (s * Cfg::kStageBytes + 2 * Cfg::kTileQ) / 4;
    const float* delta = lse2 + BQ;

    dkdv_warp_item<D, BQ>(
        dk, dv, [&](uint32_t(&f)[4], int ks) { frag(f, kf, sK, ks); },
        [&](uint32_t(&f)[4], int ks) { frag(f, vf, sV, ks); }, tq, tdo, lse2, delta, k0 + wkey + 15 > q0,
        [&](int half, int col) { return key_lo + 8 * half > q0 + col; }, a.scale_log2, lane);
    __syncthreads();  // the next prefetch overwrites this stage
  }

  if (splits > 1) {  // fp32 partials, reduced by flash_backward_reduce_kernel
    const int64_t part = (int64_t(split) * a.B * a.T + int64_t(b) * a.T) * a.Hk * a.d;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = k0 + wkey + g + 8 * half;
      if (key >= a.T) continue;
      const int64_t row = part + (int64_t(key) * a.Hk + hk) * a.d;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        const int col = nt * 8 + 2 * t;
        if (col >= a.d) continue;
        *reinterpret_cast<float2*>(a.dk_part + row + col) =
            make_float2(dk[0][nt][2 * half] * a.scale, dk[0][nt][2 * half + 1] * a.scale);
        *reinterpret_cast<float2*>(a.dv_part + row + col) = make_float2(dv[0][nt][2 * half], dv[0][nt][2 * half + 1]);
      }
    }
    return;
  }
  // K and V tiles are free: stage dK and dV there for 16-byte stores.
  const float kscale[1][2] = {{a.scale, a.scale}}, one[1][2] = {{1.f, 1.f}};
  stage_accumulator<D, 1>(smem, dk, kscale, wkey, lane);
  stage_accumulator<D, 1>(smem + Cfg::kTileKV, dv, one, wkey, lane);
  __syncthreads();
  store_tile<D, BK, Cfg::THREADS>(a.dk + kv_off, kv_stride, k0, a.T, a.d, smem, tid);
  store_tile<D, BK, Cfg::THREADS>(a.dv + kv_off, kv_stride, k0, a.T, a.d, smem + Cfg::kTileKV, tid);
}

// dK, dV = the sum of the S split partials, in split order; 4 elements per thread (d % 8 == 0).
// static: a non-template kernel in a header included by several translation units.
static __global__ void __launch_bounds__(256) flash_backward_reduce_kernel(const BackwardArgs a, int splits) {
  const int64_t n = int64_t(a.B) * a.T * a.Hk * a.d;
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  float4 k = *reinterpret_cast<const float4*>(a.dk_part + i), v = *reinterpret_cast<const float4*>(a.dv_part + i);
  for (int s = 1; s < splits; ++s) {
    const float4 ks = *reinterpret_cast<const float4*>(a.dk_part + s * n + i);
    const float4 vs = *reinterpret_cast<const float4*>(a.dv_part + s * n + i);
    k = make_float4(k.x + ks.x, k.y + ks.y, k.z + ks.z, k.w + ks.w);
    v = make_float4(v.x + vs.x, v.y + vs.y, v.z + vs.z, v.w + vs.w);
  }
  *reinterpret_cast<uint2*>(a.dk + i) = make_uint2(pack_bf16(k.x, k.y), pack_bf16(k.z, k.w));
  *reinterpret_cast<uint2*>(a.dv + i) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
}

// dQ = bf16(scale * the fp32 sums [B, Hq, Tpad, W]) that a dK/dV pass with dQ left in a.dq_acc;
// 4 elements per thread (d % 8 == 0).
template <int W>
__global__ void __launch_bounds__(256) flash_backward_dq_convert_kernel(const BackwardArgs a) {
  const int64_t n = int64_t(a.B) * a.T * a.Hq * a.d;
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  const int64_t row = i / a.d;  // (b, t, h) of [B, T, Hq, d]
  const int c = int(i - row * a.d), h = int(row % a.Hq);
  const int64_t bt = row / a.Hq, b = bt / a.T, t = bt - b * a.T;
  // c % 4 == 0: columns c .. c + 3 are two neighbouring lanes' pairs, 16 contiguous bytes.
  const float4 x = *reinterpret_cast<const float4*>(a.dq_acc + dq_sum_index<W>((b * a.Hq + h) * a.Tpad + t, c));
  *reinterpret_cast<uint2*>(a.dq + i) =
      make_uint2(pack_bf16(x.x * a.scale, x.y * a.scale), pack_bf16(x.z * a.scale, x.w * a.scale));
}

// ---------------------------------------------------------------------------------------------
// One KV block of a dQ walk (warps own query rows, as in the forward pass), in two steps so that the
// MoDA kernels can also use P and dS. dq_block_scores: P = exp2(S - lse2) with S = Q K^T (0 where
// `masked_block` and the mask hides the key) and dS = P * (dP - delta) with dP = dO V^T, for the warp's rows
// (the first is row0) against the block's keys (the first is key0).
template <class Cfg, class Mask>
__device__ __forceinline__ void dq_block_scores(float (&p)[Cfg::MT][Cfg::BK / 8][4],
                                                float (&ds)[Cfg::MT][Cfg::BK / 8][4],
                                                const uint32_t (&qf)[Cfg::MT][Cfg::D / 16][4],
                                                const uint32_t (&df)[Cfg::MT][Cfg::D / 16][4],
                                                const float (&lse2)[Cfg::MT][2], const float (&delta)[Cfg::MT][2],
                                                uint32_t sK, uint32_t sV, int row0, int key0, bool masked_block,
                                                const Mask& mask, float scale_log2, int lane) {
  constexpr int D = Cfg::D, MT = Cfg::MT, BK = Cfg::BK;
  using Tile = SwizzledTile<D>;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[mt][nt][e] = ds[mt][nt][e] = 0.f;
        // S = Q K^T and dP = dO V^T.
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int np = 0; np < BK / 16; ++np) {
      uint32_t bk[4], bv[4];
      Tile::load_b(bk, sK, np * 16, ks * 16, lane);
      Tile::load_b(bv, sV, np * 16, ks * 16, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816(p[mt][2 * np], qf[mt][ks], bk[0], bk[1]);
        mma_16816(p[mt][2 * np + 1], qf[mt][ks], bk[2], bk[3]);
        mma_16816(ds[mt][2 * np], df[mt][ks], bv[0], bv[1]);
        mma_16816(ds[mt][2 * np + 1], df[mt][ks], bv[2], bv[3]);
      }
    }
  // dS = P * (dP - delta).
  split_by_mask(masked_block, [&](auto masked) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + mt * 16 + g + 8 * half;
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 2 * half + e;
            float x = exp2_approx(p[mt][nt][i] * scale_log2 - lse2[mt][half]);
            if (masked && !mask.visible(row, key0 + nt * 8 + 2 * t + e)) x = 0.f;
            p[mt][nt][i] = x;
            ds[mt][nt][i] = x * (ds[mt][nt][i] - delta[mt][half]);
          }
      }
  });
}

// dQ += dS K for one KV block (unscaled; the caller scales once at the end).
template <class Cfg>
__device__ __forceinline__ void dq_block_accumulate(float (&dq)[Cfg::MT][Cfg::D / 8][4],
                                                    const float (&ds)[Cfg::MT][Cfg::BK / 8][4], uint32_t sK, int lane) {
  constexpr int D = Cfg::D, MT = Cfg::MT, BK = Cfg::BK;
  using Tile = SwizzledTile<D>;
#pragma unroll
  for (int ks = 0; ks < BK / 16; ++ks) {
    uint32_t da[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      da[mt][0] = pack_bf16(ds[mt][2 * ks][0], ds[mt][2 * ks][1]);
      da[mt][1] = pack_bf16(ds[mt][2 * ks][2], ds[mt][2 * ks][3]);
      da[mt][2] = pack_bf16(ds[mt][2 * ks + 1][0], ds[mt][2 * ks + 1][1]);
      da[mt][3] = pack_bf16(ds[mt][2 * ks + 1][2], ds[mt][2 * ks + 1][3]);
    }
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t bk[4];
      Tile::load_b_trans(bk, sK, ks * 16, np * 16, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816(dq[mt][2 * np], da[mt], bk[0], bk[1]);
        mma_16816(dq[mt][2 * np + 1], da[mt], bk[2], bk[3]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// dQ. Same tiling and KV walk as the forward pass (ForwardConfig); Q and dO fragments stay in
// registers, with each row's lse2 and delta.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) flash_backward_dq_kernel(const BackwardArgs a) {
  static_assert(kRowPad % Cfg::BQ == 0, "dQ tiles must not pass the padded statistics rows");
  constexpr int D = Cfg::D, MT = Cfg::MT, BK = Cfg::BK;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2;
  const auto [q0, b, h, hk, q_stride, kv_stride, q_off, kv_off] = query_tile(a, Cfg::BQ);

  // Q and dO tiles, then the double-buffered KV stages (the layout ForwardConfig counts holds only
  // one Q-sized tile before the stages, so dO goes after them).
  const uint32_t sQ = smem_addr(smem), stages = sQ + Cfg::kTileQ, sDO = stages + 2 * Cfg::kStageBytes;
  load_tile_async<D, Cfg::BQ, Cfg::THREADS>(sQ, a.q + q_off, q_stride, q0, a.T, a.d, tid);
  load_tile_async<D, Cfg::BQ, Cfg::THREADS>(sDO, a.dout + q_off, q_stride, q0, a.T, a.d, tid);
  cp_async_commit();
  const SequenceKv<Cfg> seq{a.k + kv_off, a.v + kv_off, kv_stride, a.T, a.d, q0};
  start_source<Cfg>(seq, stages, tid);
  cp_async_wait<1>();
  __syncthreads();

  const int wrow = warp * MT * 16;
  uint32_t qf[MT][D / 16][4], df[MT][D / 16][4];
  load_row_fragments<D, MT>(qf, sQ, wrow, lane);
  load_row_fragments<D, MT>(df, sDO, wrow, lane);
  float lse2[MT][2], delta[MT][2];
  const int64_t r_off = (int64_t(b) * a.Hq + h) * a.Tpad;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = q0 + wrow + mt * 16 + g + 8 * half;  // < Tpad: tiles never pass the padding
      lse2[mt][half] = a.lse2[r_off + row];
      delta[mt][half] = a.delta[r_off + row];
    }

  float dq[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[mt][nt][e] = 0.f;

  const int row0 = q0 + wrow;
  for_each_block<Cfg>(seq, stages, tid, [&](int n, uint32_t sK, uint32_t sV) {
    float p[MT][BK / 8][4], ds[MT][BK / 8][4];
    dq_block_scores<Cfg>(p, ds, qf, df, lse2, delta, sK, sV, row0, seq.key0(n), seq.masked(n), seq.mask(), a.scale_log2,
                         lane);
    dq_block_accumulate<Cfg>(dq, ds, sK, lane);
  });

  float qscale[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) qscale[mt][0] = qscale[mt][1] = a.scale;
  stage_accumulator<D, MT>(smem, dq, qscale, wrow, lane);
  __syncthreads();
  store_tile<D, Cfg::BQ, Cfg::THREADS>(a.dq + q_off, q_stride, q0, a.T, a.d, smem, tid);
}

// Shared memory of the dQ kernel: ForwardConfig's layout plus the dO tile.
template <class Cfg>
__host__ __device__ constexpr int dq_smem_bytes() {
  return Cfg::kSmemBytes + Cfg::kTileQ;
}

}  // namespace fathom::cuda::flash
