// Flash-attention backward on Hopper warpgroup MMAs (sm_90a): the dK/dV and dQ passes of
// attention_backward.cuh with the same contract (deterministic, no atomics, the G query heads summed
// in registers, the same prepare pass, split partials and reduction), their tile products issued as
// wgmma. Each warpgroup owns 64 rows of its CTA's tile: keys in the dK/dV pass, queries in the dQ pass.
//
//   dK/dV, per (query head, query block) item:  S^T = K Q^T and dP^T = V dO^T (shared-memory operands),
//     P^T = exp2(S^T - lse2), dS^T = P^T (dP^T - delta), then dV += P^T dO and dK += dS^T Q with P^T and
//     dS^T straight from registers and dO, Q read N-major.
//   dQ, per KV block:  S = Q K^T, dP = dO V^T, P, dS as above, then dQ += dS K with K read N-major.
// Each pass overlaps its softmax work with the product still in flight: P is computed while dP runs,
// and (dK/dV) dS while dV runs. The streamed tiles come through a StageRing (tma.cuh) filled by one
// thread, so the CTA's warpgroups drift apart and one's softmax overlaps another's products.
#pragma once
#include "kernels/cuda/attention_backward.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace fathom::cuda::flash {

// ---------------------------------------------------------------------------------------------
// dK / dV. WARPGROUPS x 64 keys per CTA; query blocks of BQ rows (Q, dO and their lse2 and delta rows,
// copied by one thread) stream through a StageRing of STAGES.
template <int D_, int BQ_, int WARPGROUPS_, int MIN_BLOCKS_, int STAGES_>
struct WgmmaDkDvConfig {
  static constexpr int D = D_, BQ = BQ_, WARPGROUPS = WARPGROUPS_, MIN_BLOCKS = MIN_BLOCKS_, kStages = STAGES_;
  static constexpr int WARPS = WARPGROUPS * 4, THREADS = WARPS * 32, BK = WARPGROUPS * 64;
  using KvTile = PanelTile<BK, D>;
  using QTile = PanelTile<BQ, D>;
  using Ring = StageRing<kStages, WARPS>;
  static constexpr int kTileStageBytes = 2 * QTile::kBytes;  // Q and dO
  static constexpr int kRowStageBytes = 2 * BQ * 4;          // lse2[BQ], delta[BQ]
  static constexpr int kStageBytes = kTileStageBytes + kRowStageBytes;
  static constexpr int kRowsOffset = 2 * KvTile::kBytes + kStages * kTileStageBytes;
  static constexpr int kBarrierOffset = kRowsOffset + kStages * kRowStageBytes;
  static constexpr int kSmemBytes = kBarrierOffset + Ring::kBarrierBytes;
  static_assert(D == 64 || D == 128, "wgmma tiles are 64 or 128 columns");
  static_assert((BQ == 64 || BQ == 128) && kRowPad % BQ == 0, "query blocks must tile the padded rows");
  static_assert(kStages >= 2, "a stage is refilled while the other is read");
  static_assert(kSmemBytes <= kMaxSmemPerBlock, "the K/V tiles and the ring exceed a block's shared memory");
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    flash_backward_dkdv_wgmma_kernel(const BackwardArgs a, const __grid_constant__ QdoMaps maps) {
#if FATHOM_WGMMA_DEVICE
  constexpr int D = Cfg::D, BQ = Cfg::BQ, BK = Cfg::BK;
  using KvTile = typename Cfg::KvTile;
  using QTile = typename Cfg::QTile;
  char* smem = wgmma_shared();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const auto [k0, b, hk, q_stride, kv_stride, kv_off] = key_block(a, BK);

  const uint32_t sK = smem_addr(smem), sV = sK + KvTile::kBytes, stages = sV + KvTile::kBytes;
  auto sQ = [&](int n) { return stages + uint32_t((n % Cfg::kStages) * Cfg::kTileStageBytes); };
  auto sDO = [&](int n) { return sQ(n) + uint32_t(QTile::kBytes); };
  auto sRows = [&](int n) { return sK + uint32_t(Cfg::kRowsOffset + (n % Cfg::kStages) * Cfg::kRowStageBytes); };
  const float* rows = reinterpret_cast<const float*>(smem + Cfg::kRowsOffset);
  const typename Cfg::Ring ring{sK + uint32_t(Cfg::kBarrierOffset)};
  if (tid == 0) ring.init();

  load_tile_async<D, BK, Cfg::THREADS, KvTile>(sK, a.k + kv_off, kv_stride, k0, a.T, a.d, tid);
  load_tile_async<D, BK, Cfg::THREADS, KvTile>(sV, a.v + kv_off, kv_stride, k0, a.T, a.d, tid);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();  // barriers initialised, K and V published

  const DkDvItems work = dkdv_items(a, k0, hk, BQ);
  const int items = work.count, split = int(blockIdx.z), splits = int(gridDim.z);
  auto load_item = [&](int item) {  // by thread 0; rows are 16-byte aligned (Tpad and q0 are multiples of 128 and BQ)
    const int h = work.head(item), q0 = work.q0(item);
    const int64_t r_off = (int64_t(b) * a.Hq + h) * a.Tpad + q0;
    ring.acquire(item, Cfg::kStageBytes);
    tma_load_rows<QTile>(sQ(item), &maps.q, ring.full(item), h, q0, b);
    tma_load_rows<QTile>(sDO(item), &maps.dout, ring.full(item), h, q0, b);
    bulk_load(sRows(item), a.lse2 + r_off, BQ * 4, ring.full(item));
    bulk_load(sRows(item) + BQ * 4, a.delta + r_off, BQ * 4, ring.full(item));
  };
  if (tid == 0)
    for (int item = 0; item < min(Cfg::kStages - 1, items); ++item) load_item(item);

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  const int wkey = wg * 64 + (warp & 3) * 16;  // this warp's first key within the block
  const int key_lo = k0 + wkey + g;            // this thread's keys: key_lo and key_lo + 8
  for (int item = 0; item < items; ++item) {
    if (tid == 0 && item + Cfg::kStages - 1 < items) load_item(item + Cfg::kStages - 1);
    ring.wait_full(item);
    const int q0 = work.q0(item);
    const uint32_t tq = sQ(item), tdo = sDO(item);
    const float* lse2 = rows + (item % Cfg::kStages) * 2 * BQ;
    const float* delta = lse2 + BQ;

    float p[BQ / 2], ds[BQ / 2];
    wgmma_fence();
    wgmma_product<BQ, D / 16>(p, [&](int ks) { return k_major_desc<BK, D>(sK, wg * 64, ks); },
                              [&](int ks) { return k_major_desc<BQ, D>(tq, 0, ks); });
    wgmma_commit();
    wgmma_product<BQ, D / 16>(ds, [&](int ks) { return k_major_desc<BK, D>(sV, wg * 64, ks); },
                              [&](int ks) { return k_major_desc<BQ, D>(tdo, 0, ks); });
    wgmma_commit();

    // P^T while dP^T is in flight; the causal mask matters only where a key passes the block's first query.
    wgmma_wait<1>(p);
    split_by_mask(k0 + wkey + 15 > q0, [&](auto masked) {
#pragma unroll
      for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * t + e;
          const float l2 = lse2[col];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float x = exp2_approx(p[4 * j + 2 * half + e] * a.scale_log2 - l2);
            if (masked && key_lo + 8 * half > q0 + col) x = 0.f;
            p[4 * j + 2 * half + e] = x;
          }
        }
    });
    // dV += P^T dO, in flight while dS^T is formed.
    issue_product_of_accumulator<D, BQ / 16>(dv, p, [&](int ks) { return mn_major_desc<BQ, D>(tdo, ks); });

    // dS^T = P^T * (dP^T - delta).
    wgmma_wait<1>(ds);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float dl = delta[8 * j + 2 * t + e];
        ds[4 * j + e] = p[4 * j + e] * (ds[4 * j + e] - dl);
        ds[4 * j + 2 + e] = p[4 * j + 2 + e] * (ds[4 * j + 2 + e] - dl);
      }
    // dK += dS^T Q (scaled at the end).
    issue_product_of_accumulator<D, BQ / 16>(dk, ds, [&](int ks) { return mn_major_desc<BQ, D>(tq, ks); });
    wgmma_wait<0>(dv, dk);
    // This thread read the stage's lse2 and delta rows through the generic proxy; the copy that refills
    // them is in the async proxy, so order the reads before it.
    fence_proxy_async();
    ring.release(item, lane);
  }

  if (splits > 1) {  // fp32 partials, reduced by flash_backward_reduce_kernel
    const int64_t part = (int64_t(split) * a.B * a.T + int64_t(b) * a.T) * a.Hk * a.d;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = key_lo + 8 * half;
      if (key >= a.T) continue;
      const int64_t row = part + (int64_t(key) * a.Hk + hk) * a.d;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const int col = 8 * j + 2 * t;
        if (col >= a.d) continue;
        *reinterpret_cast<float2*>(a.dk_part + row + col) =
            make_float2(dk[4 * j + 2 * half] * a.scale, dk[4 * j + 2 * half + 1] * a.scale);
        *reinterpret_cast<float2*>(a.dv_part + row + col) = make_float2(dv[4 * j + 2 * half], dv[4 * j + 2 * half + 1]);
      }
    }
    return;
  }
  // K and V tiles are free once every warp's products reading them have completed: stage dK and dV there.
  __syncthreads();
  stage_wgmma_accumulator<KvTile>(smem, dk, {a.scale, a.scale}, wkey, lane);
  stage_wgmma_accumulator<KvTile>(smem + KvTile::kBytes, dv, {1.f, 1.f}, wkey, lane);
  __syncthreads();
  store_tile<D, BK, Cfg::THREADS, KvTile>(a.dk + kv_off, kv_stride, k0, a.T, a.d, smem, tid);
  store_tile<D, BK, Cfg::THREADS, KvTile>(a.dv + kv_off, kv_stride, k0, a.T, a.d, smem + KvTile::kBytes, tid);
#else
  __trap();  // launched only from builds that target sm_90a
#endif
}

// ---------------------------------------------------------------------------------------------
// dQ. WARPGROUPS x 64 query rows per CTA (Q and dO tiles), KV blocks of BK keys in a StageRing of STAGES.
template <int D_, int BK_, int WARPGROUPS_, int MIN_BLOCKS_, int STAGES_>
struct WgmmaDqConfig {
  static constexpr int D = D_, BK = BK_, WARPGROUPS = WARPGROUPS_, MIN_BLOCKS = MIN_BLOCKS_, kStages = STAGES_;
  static constexpr int WARPS = WARPGROUPS * 4, THREADS = WARPS * 32, BQ = WARPGROUPS * 64;
  using QTile = PanelTile<BQ, D>;
  using KvTile = PanelTile<BK, D>;
  using Ring = StageRing<kStages, WARPS>;
  static constexpr int kStageBytes = 2 * KvTile::kBytes;  // one K tile and one V tile
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kBarrierBytes = Ring::kBarrierBytes;  // after everything else
  static constexpr int kSmemBytes = 2 * QTile::kBytes + kRingBytes + kBarrierBytes;
  static_assert(kStages >= 2, "a stage is refilled while the other is read");
  static_assert(kSmemBytes <= kMaxSmemPerBlock, "the Q/dO tiles and the ring exceed a block's shared memory");
  static_assert(D == 64 || D == 128, "wgmma tiles are 64 or 128 columns");
  static_assert(BK == 64 || BK == 128, "S = Q K^T is one m64nBKk16 wgmma per k-step");
  static_assert(kRowPad % BQ == 0, "dQ tiles must not pass the padded statistics rows");
};

// dQ += dS K over the causal keys [0, key_end) of KV head hk of batch b (tensor maps `maps`, boxes
// of Cfg::BK rows) for a query tile whose Q and dO tiles are at sQ and sDO (this warpgroup's 64 rows;
// their cp.async copies committed): key j is visible to this thread's row half h iff j <= limit[h],
// no limit is below `first_limit`, lse2 and delta are the rows' statistics. KV blocks stream through
// the StageRing at `ring` (barriers at `bars`), filled by thread 0's TMA copies. dq is unscaled.
// Returns once every warp has finished the walk: the ring and the Q and dO tiles are free.
template <class Cfg>
__device__ __forceinline__ void wgmma_dq_causal(float (&dq)[Cfg::D / 2], uint32_t sQ, uint32_t sDO, uint32_t ring,
                                                uint32_t bars, const KvMaps& maps, int hk, int b, int first_limit,
                                                int key_end, const int (&limit)[2], const float (&lse2)[2],
                                                const float (&delta)[2], float scale_log2, int tid) {
  constexpr int D = Cfg::D, BK = Cfg::BK, BQ = Cfg::BQ;
  using KvTile = typename Cfg::KvTile;
  const int wg = tid >> 7, t = tid & 3, lane = tid & 31;
  const typename Cfg::Ring stages{bars};
  auto stage_k = [&](int n) { return ring + uint32_t((n % Cfg::kStages) * Cfg::kStageBytes); };
  auto stage_v = [&](int n) { return stage_k(n) + uint32_t(KvTile::kBytes); };
  auto load_kv = [&](int n) {  // by thread 0
    stages.acquire(n, Cfg::kStageBytes);
    tma_load_rows<KvTile>(stage_k(n), &maps.k, stages.full(n), hk, n * BK, b);
    tma_load_rows<KvTile>(stage_v(n), &maps.v, stages.full(n), hk, n * BK, b);
  };
  const int n_blocks = (key_end + BK - 1) / BK;
  const int first_masked = (first_limit + 1) / BK;  // blocks from here on hold keys past some row's limit
  if (tid == 0) stages.init();
  cp_async_wait<0>();  // the Q and dO tiles
  fence_proxy_async();
  __syncthreads();  // barriers initialised, Q and dO published
  if (tid == 0)
    for (int n = 0; n < min(Cfg::kStages - 1, n_blocks); ++n) load_kv(n);

  for (int n = 0; n < n_blocks; ++n) {
    if (tid == 0 && n + Cfg::kStages - 1 < n_blocks) load_kv(n + Cfg::kStages - 1);
    stages.wait_full(n);

    float p[BK / 2], ds[BK / 2];
    wgmma_fence();
    wgmma_product<BK, D / 16>(p, [&](int ks) { return k_major_desc<BQ, D>(sQ, wg * 64, ks); },
                              [&](int ks) { return k_major_desc<BK, D>(stage_k(n), 0, ks); });
    wgmma_commit();
    wgmma_product<BK, D / 16>(ds, [&](int ks) { return k_major_desc<BQ, D>(sDO, wg * 64, ks); },
                              [&](int ks) { return k_major_desc<BK, D>(stage_v(n), 0, ks); });
    wgmma_commit();

    // P while dP is in flight.
    wgmma_wait<1>(p);
    split_by_mask(n >= first_masked, [&](auto masked) {
#pragma unroll
      for (int j = 0; j < BK / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int half = i >> 1, key = n * BK + 8 * j + 2 * t + (i & 1);
          float x = exp2_approx(p[4 * j + i] * scale_log2 - lse2[half]);
          if (masked && key > limit[half]) x = 0.f;
          p[4 * j + i] = x;
        }
    });
    wgmma_wait<0>(ds);
    // dS = P * (dP - delta); dQ += dS K.
#pragma unroll
    for (int i = 0; i < BK / 2; ++i) ds[i] = p[i] * (ds[i] - delta[(i >> 1) & 1]);
    issue_product_of_accumulator<D, BK / 16>(dq, ds, [&](int ks) { return mn_major_desc<BK, D>(stage_k(n), ks); });
    wgmma_wait<0>(dq);
    stages.release(n, lane);
  }
  __syncthreads();
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    flash_backward_dq_wgmma_kernel(const BackwardArgs a, const __grid_constant__ KvMaps maps) {
#if FATHOM_WGMMA_DEVICE
  constexpr int D = Cfg::D, BQ = Cfg::BQ;
  using QTile = typename Cfg::QTile;
  char* smem = wgmma_shared();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const auto [q0, b, h, hk, q_stride, kv_stride, q_off, kv_off] = query_tile(a, BQ);

  const uint32_t sQ = smem_addr(smem), sDO = sQ + QTile::kBytes;
  load_tile_async<D, BQ, Cfg::THREADS, QTile>(sQ, a.q + q_off, q_stride, q0, a.T, a.d, tid);
  load_tile_async<D, BQ, Cfg::THREADS, QTile>(sDO, a.dout + q_off, q_stride, q0, a.T, a.d, tid);
  cp_async_commit();

  const int wrow = warp * 16, row0 = q0 + wrow + (lane >> 2);  // this thread's rows: row0, row0 + 8
  const int limit[2] = {row0, row0 + 8};
  float lse2[2], delta[2];
  const int64_t r_off = (int64_t(b) * a.Hq + h) * a.Tpad;
#pragma unroll
  for (int half = 0; half < 2; ++half) {  // rows < Tpad: tiles never pass the padding
    lse2[half] = a.lse2[r_off + limit[half]];
    delta[half] = a.delta[r_off + limit[half]];
  }
  float dq[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq[i] = 0.f;
  const uint32_t ring = sDO + QTile::kBytes;
  wgmma_dq_causal<Cfg>(dq, sQ, sDO, ring, ring + Cfg::kRingBytes, maps, hk, b, q0, min(q0 + BQ, a.T), limit, lse2,
                       delta, a.scale_log2, tid);

  // The Q tile is free (the walk's products have all completed): stage dQ there for 16-byte stores.
  stage_wgmma_accumulator<QTile>(smem, dq, {a.scale, a.scale}, wrow, lane);
  __syncthreads();
  store_tile<D, BQ, Cfg::THREADS, QTile>(a.dq + q_off, q_stride, q0, a.T, a.d, smem, tid);
#else
  __trap();  // launched only from builds that target sm_90a
#endif
}

}  // namespace fathom::cuda::flash
