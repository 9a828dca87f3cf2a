// Flash-attention forward on Hopper warpgroup MMAs (sm_90a). Same contract as flash_forward_kernel
// (attention_forward.cuh): one CTA per (query tile, batch, query head), one online-softmax state per
// row across the causal KV blocks, normalised once, log-sum-exp returned.
//
// Each of the CTA's warpgroups owns 64 query rows. S = Q K^T is D / 16 wgmmas with both operands in
// shared memory; O += P V takes P straight from registers (an accumulator pair of 8-column tiles is the
// A fragment of a 16-key step) and reads V N-major from the same tile layout. The products of one
// warpgroup are software-pipelined so that its softmax runs while the tensor cores work: per block n
// it issues S_n and then O += P_{n-1} V_{n-1}, computes P_n as soon as S_n lands, and rescales O
// once the P V product has landed. KV blocks therefore live in a ring: block n's K, block n - 1's V,
// and the next blocks in flight. One thread fills the ring with TMA copies (tma.cuh);
// a StageRing's barriers say when a stage has landed and when every warp is done with it, so the
// warpgroups never wait for each other at a block-wide barrier.
#pragma once
#include <cmath>

#include "kernels/attention/attention_forward.cuh"
#include "kernels/hopper/tma.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace fathom::cuda::flash {

// D: head-dim capacity (64 or 128; columns past d are zero-filled). WARPGROUPS x 64 query rows per CTA;
// KV blocks of BK keys in a StageRing of STAGES: a block's stage is held for two steps (its K, then its
// V), so the ring prefetches STAGES - 2 blocks ahead.
template <int D_, int BK_, int WARPGROUPS_, int MIN_BLOCKS_, int STAGES_>
struct WgmmaForwardConfig {
  static constexpr int D = D_, BK = BK_, WARPGROUPS = WARPGROUPS_, MIN_BLOCKS = MIN_BLOCKS_, kStages = STAGES_;
  static constexpr int WARPS = WARPGROUPS * 4, THREADS = WARPS * 32, BQ = WARPGROUPS * 64;
  using QTile = PanelTile<BQ, D>;
  using KvTile = PanelTile<BK, D>;
  static constexpr int kStageBytes = 2 * KvTile::kBytes;  // one K tile and one V tile
  static constexpr int kRingBytes = kStages * kStageBytes;
  using Ring = StageRing<kStages, WARPS>;
  static constexpr int kBarrierBytes = Ring::kBarrierBytes;  // after everything else
  static constexpr int kSmemBytes = QTile::kBytes + kRingBytes + kBarrierBytes;
  static_assert(D == 64 || D == 128, "wgmma tiles are 64 or 128 columns");
  static_assert(BK == 64 || BK == 128, "S = Q K^T is one m64nBKk16 wgmma per k-step");
  static_assert(kStages >= 3, "a block's stage is held for two steps while the next is copied");
  static_assert(kSmemBytes <= kMaxSmemPerBlock, "the Q tile and the ring exceed a block's shared memory");
};

// One warpgroup's online-softmax state: per thread, rows g and g + 8 of its warp's 16 (index `half`),
// the running max m of log2-domain scores, this thread's share l of the denominator (the quad is
// summed at the end) and the unnormalised output o in the m64nD accumulator layout, which per warp is
// SoftmaxState<D, 1>'s layout: o[4j + e] is SoftmaxState's o[0][j][e].
template <int D>
struct WgmmaRowState {
  float m[2], l[2], o[D / 2];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int half = 0; half < 2; ++half) m[half] = -INFINITY, l[half] = 0.f;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  }
  // Per row half: the reciprocal of the denominator (0 for a row that saw no key) and the natural-log
  // log-sum-exp (-inf for such a row).
  __device__ __forceinline__ void finish(float (&inv)[2], float (&lse)[2]) const {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float lsum = quad_sum(l[half]);
      inv[half] = lsum > 0.f ? 1.f / lsum : 0.f;
      lse[half] = m[half] == -INFINITY ? -INFINITY : (m[half] + __log2f(lsum)) * kLn2;
    }
  }
};

// Attends a query tile (in shared memory at sQ, this warpgroup's 64 rows) to the causal keys
// [0, key_end) of KV head hk of batch b (tensor maps `maps`, boxes of Cfg::BK rows): key j is visible
// to this thread's row half h iff j <= limit[h] (the row's own position, or its token's for folded
// heads), and no row's limit is below `first_limit`, so blocks ending at or before it skip the mask.
// The Q tile's cp.async copy must have been committed. The KV blocks stream through the ring at
// `ring` (Cfg::kStages stages), whose barriers are at `bars`. Returns with this warpgroup's products
// complete; other warpgroups may still read the ring.
template <class Cfg>
__device__ __forceinline__ void wgmma_attend_causal(WgmmaRowState<Cfg::D>& st, uint32_t sQ, uint32_t ring,
                                                    uint32_t bars, const KvMaps& maps, int hk, int b, int first_limit,
                                                    int key_end, const int (&limit)[2], float scale_log2, int tid) {
  constexpr int D = Cfg::D, BK = Cfg::BK, BQ = Cfg::BQ;
  using KvTile = typename Cfg::KvTile;
  const int wg = tid >> 7, t = tid & 3;
  auto stage_k = [&](int n) { return ring + uint32_t((n % Cfg::kStages) * Cfg::kStageBytes); };
  auto stage_v = [&](int n) { return stage_k(n) + uint32_t(KvTile::kBytes); };
  const typename Cfg::Ring stages{bars};
  // Block n's stage is last read by the P V product issued in step n + 1: every warp releases it there.
  auto load_kv = [&](int n) {
    if (tid != 0) return;
    stages.acquire(n, Cfg::kStageBytes);
    tma_load_rows<KvTile>(stage_k(n), &maps.k, stages.full(n), hk, n * BK, b);
    tma_load_rows<KvTile>(stage_v(n), &maps.v, stages.full(n), hk, n * BK, b);
  };
  auto land_block = [&](int n) { stages.wait_full(n); };
  const int n_blocks = (key_end + BK - 1) / BK;
  const int first_masked = (first_limit + 1) / BK;  // blocks from here on hold keys past some row's limit
  if (tid == 0) stages.init();
  cp_async_wait<0>();  // the Q tile
  fence_proxy_async();
  __syncthreads();                          // barriers initialised, Q published
  constexpr int kAhead = Cfg::kStages - 2;  // blocks in flight beyond the one being read
  for (int n = 0; n < min(kAhead, n_blocks); ++n) load_kv(n);

  float s[BK / 2];
  auto issue_scores = [&](int n) {
    wgmma_product<BK, D / 16>(
        s, [&](int ks) { return k_major_desc<BQ, D>(sQ, wg * 64, ks); },
        [&](int ks) { return k_major_desc<BK, D>(stage_k(n), 0, ks); });
    wgmma_commit();
  };
  uint32_t p[BK / 16][4];  // P of the block whose P V product is next
  auto issue_pv = [&](int n) {
    wgmma_product_rs<D>(st.o, p, [&](int ks) { return mn_major_desc<BK, D>(stage_v(n), ks); });
    wgmma_commit();
  };
  // Online softmax of block n's scores (`masked`: the block hides keys past each row's limit): updates m
  // and l, leaves P (fp32) in `s` and the factor O must be rescaled by in `corr`. The max is taken over
  // raw scores (the scale is positive), so each score costs one FFMA and one exp2 in the log2 domain.
  // m is the reference the probabilities are taken against, not always the exact running max: it
  // moves only when a block's max passes it by more than kMaxLag (P <= 2^kMaxLag otherwise, far from
  // overflow), so most blocks leave O unscaled (corr exactly 1). The result is the same softmax: O, l
  // and m stay consistent, and the log-sum-exp is m + log2(l) whatever m is.
  constexpr float kMaxLag = 8.f;
  auto softmax = [&](int n, float(&corr)[2], auto masked) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < BK / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[4 * j + 2 * half + e];
          if (masked && n * BK + 8 * j + 2 * t + e > limit[half]) x = -INFINITY;
          mx = fmaxf(mx, x);
        }
      const float m_block = quad_max(mx) * scale_log2;
      const float m_new = m_block > st.m[half] + kMaxLag ? m_block : st.m[half];
      // A row with no visible key yet keeps max -inf; exponentiate against 0 so no inf - inf appears.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      corr[half] = exp2_approx(st.m[half] - m_use);
      st.m[half] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < BK / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[4 * j + 2 * half + e];
          x = exp2_approx(fmaf(x, scale_log2, -m_use));
          sum += x;
        }
      st.l[half] = st.l[half] * corr[half] + sum;
    }
  };
  // P as bf16 A fragments. Only once no product is in flight: the P V product in flight reads `p`,
  // and ptxas serializes wgmmas whose input registers are written while wgmmas run (C7513).
  auto pack_p = [&] {
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) accumulator_fragment(p[ks], s, ks);
  };

  // Block 0: scores and P (O is still zero, nothing to rescale).
  land_block(0);
  if (kAhead < n_blocks) load_kv(kAhead);
  float corr[2];
  wgmma_fence();
  issue_scores(0);
  wgmma_wait<0>(s);
  split_by_mask(0 >= first_masked, [&](auto masked) { softmax(0, corr, masked); });
  pack_p();
  for (int n = 1; n < n_blocks; ++n) {
    land_block(n);
    if (n + kAhead < n_blocks) load_kv(n + kAhead);
    wgmma_fence(p, st.o);
    issue_scores(n);
    issue_pv(n - 1);
    wgmma_wait<1>(s);  // S_n has landed; P_{n-1} V_{n-1} may still be running
    split_by_mask(n >= first_masked, [&](auto masked) { softmax(n, corr, masked); });
    wgmma_wait<0>(st.o);
    stages.release(n - 1, tid & 31);
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f))  // some row of the warp moved its m
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[4 * j + e] *= corr[e >> 1];
    pack_p();
  }
  wgmma_fence(p, st.o);
  issue_pv(n_blocks - 1);
  wgmma_wait<0>(st.o);
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    flash_forward_wgmma_kernel(const ForwardArgs a, const __grid_constant__ KvMaps maps) {
#if FATHOM_WGMMA_DEVICE
  constexpr int D = Cfg::D, BQ = Cfg::BQ;
  using QTile = typename Cfg::QTile;
  char* smem = wgmma_shared();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const auto [q0, b, h, hk, q_stride, kv_stride, q_off, kv_off] = query_tile(a, BQ);

  const uint32_t sQ = smem_addr(smem);
  load_tile_async<D, BQ, Cfg::THREADS, QTile>(sQ, a.q + q_off, q_stride, q0, a.T, a.d, tid);
  cp_async_commit();
  const int wrow = warp * 16, row0 = q0 + wrow + (lane >> 2);  // this thread's rows: row0, row0 + 8
  const int limit[2] = {row0, row0 + 8};
  WgmmaRowState<D> st;
  st.init();
  const uint32_t ring = sQ + QTile::kBytes;
  wgmma_attend_causal<Cfg>(st, sQ, ring, ring + Cfg::kRingBytes, maps, hk, b, q0, min(q0 + BQ, a.T), limit,
                           a.scale_log2, tid);

  // Normalise once; the log-sum-exp goes back to natural log.
  float inv[2], lse[2];
  st.finish(inv, lse);
#pragma unroll
  for (int half = 0; half < 2; ++half)
    if ((lane & 3) == 0 && limit[half] < a.T) a.lse[(int64_t(b) * a.Hq + h) * a.T + limit[half]] = lse[half];
  // Each warp stages only its own rows of the Q tile, which only its warpgroup's products read, and
  // those have completed: O goes there for 16-byte stores.
  stage_wgmma_accumulator<QTile>(smem, st.o, inv, wrow, lane);
  __syncthreads();
  store_tile<D, BQ, Cfg::THREADS, QTile>(a.o + q_off, q_stride, q0, a.T, a.d, smem, tid);
#else
  __trap();  // launched only from builds that target sm_90a
#endif
}

}  // namespace fathom::cuda::flash
