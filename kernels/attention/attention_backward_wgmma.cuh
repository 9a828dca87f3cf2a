// Flash-attention backward on Hopper warpgroup MMAs (sm_90a): the dK/dV and dQ passes of
// attention_backward.cuh with the same contract (deterministic, sums in a fixed order, the G query heads summed
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
//
// dK/dV with dQ (configurations with DQ): the pass also forms dQ = dS K for each item, so that the
// dQ pass's recomputation of S and dP (two of its three products) is not needed. The warpgroups put
// their dS^T rows into one shared tile, each multiplies a 64-query slab of it by the CTA's K and stages
// the fp32 result; a writer warp adds the slab into fp32 sums in global memory with a bulk reduction.
// The sums stay deterministic: the key blocks of a head add into a slab strictly in key-block order,
// each waiting for its turn on a per-slab counter. A CTA waits only on lower key blocks of its head,
// whose CTAs drew their tickets, and so started, before it (key_block), and every key block meets a
// query block at the same step of its walk (dkdv_items). The writer and the ring's producer form an
// extra warpgroup that hands most of its registers to the multiplying ones (setmaxnreg), so that
// neither the copies nor the turn-taking ever stall a warpgroup that multiplies.
#pragma once
#include "kernels/attention/attention_backward.cuh"
#include "kernels/hopper/tma.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace fathom::cuda::flash {

// ---------------------------------------------------------------------------------------------
// dK / dV. WARPGROUPS x 64 keys per CTA; query blocks of BQ rows (Q, dO and their lse2 and delta rows,
// copied by one thread) stream through a StageRing of STAGES.
template <int D_, int BQ_, int WARPGROUPS_, int MIN_BLOCKS_, int STAGES_, bool DQ_ = false>
struct WgmmaDkDvConfig {
  static constexpr int D = D_, BQ = BQ_, WARPGROUPS = WARPGROUPS_, MIN_BLOCKS = MIN_BLOCKS_, kStages = STAGES_;
  static constexpr bool DQ = DQ_;
  static constexpr int WARPS = WARPGROUPS * 4, BK = WARPGROUPS * 64;  // WARPS: the warps that multiply
  static constexpr int MMA_THREADS = WARPS * 32, THREADS = MMA_THREADS + (DQ ? 128 : 0);  // + the producer warpgroup
  // With DQ, registers per thread of the producer warpgroup and of the others (setmaxnreg): together
  // within the 64K of an SM, one CTA per SM.
  static constexpr int kProducerRegs = 24, kMmaRegs = 240;
  using KvTile = PanelTile<BK, D>;
  using QTile = PanelTile<BQ, D>;
  using DsTile = PanelTile<BK, BQ>;  // dS^T of an item: keys x queries
  using Ring = StageRing<kStages, WARPS>;
  static constexpr int kTileStageBytes = 2 * QTile::kBytes;  // Q and dO
  static constexpr int kRowStageBytes = 2 * BQ * 4;          // lse2[BQ], delta[BQ]
  static constexpr int kStageBytes = kTileStageBytes + kRowStageBytes;
  static constexpr int kSlabBytes = 64 * D * 4;  // one warpgroup's fp32 dQ rows of an item (two stages, alternating)
  static constexpr int kRowsOffset = 2 * KvTile::kBytes + kStages * kTileStageBytes;
  static constexpr int kDsOffset = kRowsOffset + kStages * kRowStageBytes;  // two dS tiles, items alternating
  static constexpr int kSlabOffset = kDsOffset + (DQ ? 2 * DsTile::kBytes : 0);
  static constexpr int kBarrierOffset = kSlabOffset + (DQ ? 2 * WARPGROUPS * kSlabBytes : 0);
  static constexpr int kSlabBarrierBytes = DQ ? 2 * 8 * 2 * WARPGROUPS : 0;  // per slab stage: staged, read
  static constexpr int kTicketOffset = kBarrierOffset + Ring::kBarrierBytes + kSlabBarrierBytes;  // with DQ
  static constexpr int kSmemBytes = kTicketOffset + (DQ ? 16 : 0);
  static_assert(D == 64 || D == 128, "wgmma tiles are 64 or 128 columns");
  static_assert((BQ == 64 || BQ == 128) && kRowPad % BQ == 0, "query blocks must tile the padded rows");
  static_assert(kStages >= 2, "a stage is refilled while the other is read");
  static_assert(!DQ || BQ == WARPGROUPS * 64, "each warpgroup multiplies one 64-query slab of dS by K");
  static_assert(kDsOffset % 1024 == 0, "dS panels start 1024-byte aligned");
  static_assert(kSmemBytes <= kMaxSmemPerBlock, "the K/V tiles and the ring exceed a block's shared memory");
  static_assert(!DQ || (MIN_BLOCKS == 1 && kProducerRegs * 128 + kMmaRegs * MMA_THREADS <= 65536),
                "the warpgroups' registers must fit one CTA per SM");
};

// Hands registers back (dec) or takes them (inc), for every thread of the warpgroup; the compiler
// allocates the code after it within the new count.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// bar.sync on barrier `id` (1..15) for `threads` threads: the warps that reach it with that id (the
// multiplying warpgroups, once the producer warpgroup has left) wait for each other only.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A dQ slab's counter of key blocks added in: wait_turn spins until it reaches `turn`; pass_turn,
// once this thread's bulk additions before it have completed, counts one more.
__device__ __forceinline__ void wait_turn(const int* counter, int turn) {
  int seen;
  while (true) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    if (seen == turn) break;
    __nanosleep(64);
  }
  fence_proxy_async_global();  // the bulk addition that follows comes after what the counter published
}
__device__ __forceinline__ void pass_turn(int* counter) {
  fence_proxy_async_global();
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// The writer warp's lane 0 of a dK/dV pass with dQ: for each item and warpgroup w, waits until the slab
// is staged (item n in stage n % 2 at slab(w, n), barrier staged(w, n)), then, in this key block's turn,
// stores it over the slab's fp32 sums (the first key block: they start as garbage) or adds it into them,
// and frees the stage (barrier read(w, n)) once the copy has read it. A slab's counter moves on once its
// addition has completed, checked when the next one is issued so that the two overlap.
template <class Cfg, class Slab, class Staged, class Read>
__device__ __forceinline__ void write_dq_slabs(const BackwardArgs& a, const DkDvItems<true>& work, int k0, int b,
                                               const Slab& slab, const Staged& staged, const Read& read) {
  constexpr uint32_t kBytes = Cfg::kSlabBytes;
  const int turn = k0 / Cfg::BK;  // key blocks 0 .. turn - 1 add into every slab this one does
  int* added = nullptr;           // the last slab issued, whose counter has not moved on yet
  for (int item = 0; item < work.count; ++item) {
    const int64_t head_rows = (int64_t(b) * a.Hq + work.head(item)) * a.Tpad;
    for (int w = 0; w < Cfg::WARPGROUPS; ++w) {
      mbarrier_wait(staged(w, item), uint32_t(item >> 1) & 1u);
      const int r0 = work.q0(item) + 64 * w;
      if (r0 < a.T && k0 <= r0 + 63) {  // some key of the block is visible to the slab
        int* counter = a.dq_turn + (head_rows + r0) / 64;
        float* dst = a.dq_acc + (head_rows + r0) * Cfg::D;
        wait_turn(counter, turn);
        if (turn == 0)
          bulk_store(dst, slab(w, item), kBytes);
        else
          bulk_reduce_add(dst, slab(w, item), kBytes);
        bulk_commit();
        bulk_wait_read<0>();
        mbarrier_arrive(read(w, item));
        if (added != nullptr) {
          bulk_wait<1>();
          pass_turn(added);
        }
        added = counter;
      } else {
        mbarrier_arrive(read(w, item));
      }
    }
  }
  if (added != nullptr) {
    bulk_wait<0>();
    pass_turn(added);
  }
}

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
  const int ticket = Cfg::DQ ? draw_ticket(a, reinterpret_cast<int*>(smem + Cfg::kTicketOffset)) : 0;
  const auto [k0, b, hk, q_stride, kv_stride, kv_off] = key_block<Cfg::DQ>(a, BK, ticket);

  const uint32_t sK = smem_addr(smem), sV = sK + KvTile::kBytes, stages = sV + KvTile::kBytes;
  auto sQ = [&](int n) { return stages + uint32_t((n % Cfg::kStages) * Cfg::kTileStageBytes); };
  auto sDO = [&](int n) { return sQ(n) + uint32_t(QTile::kBytes); };
  // Item n's lse2 and delta rows, copied in at sRows(n) and read at rows + row_stage(n) floats.
  auto row_stage = [&](int n) { return (n % Cfg::kStages) * (Cfg::kRowStageBytes / 4); };
  auto sRows = [&](int n) { return sK + uint32_t(Cfg::kRowsOffset + 4 * row_stage(n)); };
  const float* rows = reinterpret_cast<const float*>(smem + Cfg::kRowsOffset);
  const typename Cfg::Ring ring{sK + uint32_t(Cfg::kBarrierOffset)};
  // With DQ: item n's dS^T tile, and warpgroup w's fp32 dQ slab of item n (two stages, items
  // alternating) with its barriers: staged (one arrival per warp of w) and read (by the writer).
  auto ds_offset = [&](int n) { return Cfg::kDsOffset + (n & 1) * Cfg::DsTile::kBytes; };
  auto sDS = [&](int n) { return sK + uint32_t(ds_offset(n)); };
  auto slab_offset = [&](int w, int n) { return Cfg::kSlabOffset + (2 * w + (n & 1)) * Cfg::kSlabBytes; };
  auto slab = [&](int w, int n) { return sK + uint32_t(slab_offset(w, n)); };
  const uint32_t slab_bars = sK + uint32_t(Cfg::kBarrierOffset + Cfg::Ring::kBarrierBytes);
  auto slab_staged = [&](int w, int n) { return slab_bars + uint32_t(8 * (2 * w + (n & 1))); };
  auto slab_read = [&](int w, int n) { return slab_bars + uint32_t(8 * (2 * Cfg::WARPGROUPS + 2 * w + (n & 1))); };
  if (tid == 0) {
    if constexpr (Cfg::DQ)
      for (int w = 0; w < Cfg::WARPGROUPS; ++w)
        for (int n = 0; n < 2; ++n) {
          mbarrier_init(slab_staged(w, n), 4);
          mbarrier_init(slab_read(w, n), 1);
        }
    ring.init();
  }

  load_tile_async<D, BK, Cfg::THREADS, KvTile>(sK, a.k + kv_off, kv_stride, k0, a.T, a.d, tid);
  load_tile_async<D, BK, Cfg::THREADS, KvTile>(sV, a.v + kv_off, kv_stride, k0, a.T, a.d, tid);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  __syncthreads();  // barriers initialised, K and V published

  const auto work = dkdv_items<Cfg::DQ>(a, k0, hk, BQ);
  const int items = work.count, split = int(blockIdx.z), splits = int(gridDim.z);
  auto load_item = [&](int item) {  // by one thread; rows are 16-byte aligned (Tpad and q0 are multiples of 128 and BQ)
    const int h = work.head(item), q0 = work.q0(item);
    const int64_t r_off = (int64_t(b) * a.Hq + h) * a.Tpad + q0;
    ring.acquire(item, Cfg::kStageBytes);
    tma_load_rows<QTile>(sQ(item), &maps.q, ring.full(item), h, q0, b);
    tma_load_rows<QTile>(sDO(item), &maps.dout, ring.full(item), h, q0, b);
    bulk_load(sRows(item), a.lse2 + r_off, BQ * 4, ring.full(item));
    bulk_load(sRows(item) + BQ * 4, a.delta + r_off, BQ * 4, ring.full(item));
  };
  if constexpr (Cfg::DQ) {
    if (warp >= Cfg::WARPS) {  // the producer warpgroup: one warp fills the ring, one writes dQ
      setmaxnreg_dec<Cfg::kProducerRegs>();
      if (lane == 0 && warp == Cfg::WARPS)
        for (int item = 0; item < items; ++item) load_item(item);
      if (lane == 0 && warp == Cfg::WARPS + 1) write_dq_slabs<Cfg>(a, work, k0, b, slab, slab_staged, slab_read);
      return;  // only barriers among the multiplying warps follow
    }
    setmaxnreg_inc<Cfg::kMmaRegs>();
  } else if (tid == 0) {
    for (int item = 0; item < min(Cfg::kStages - 1, items); ++item) load_item(item);
  }

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  const int wkey = wg * 64 + (warp & 3) * 16;  // this warp's first key within the block
  const int key_lo = k0 + wkey + g;            // this thread's keys: key_lo and key_lo + 8
  for (int item = 0; item < items; ++item) {
    if (!Cfg::DQ && tid == 0 && item + Cfg::kStages - 1 < items) load_item(item + Cfg::kStages - 1);
    ring.wait_full(item);
    const int q0 = work.q0(item);
    const uint32_t tq = sQ(item), tdo = sDO(item);
    const float* lse2 = rows + row_stage(item);
    const float* delta = lse2 + BQ;

    float p[BQ / 2], ds[BQ / 2];
    wgmma_fence();
    wgmma_product<BQ, D / 16>(
        p, [&](int ks) { return k_major_desc<BK, D>(sK, wg * 64, ks); },
        [&](int ks) { return k_major_desc<BQ, D>(tq, 0, ks); });
    wgmma_commit();
    wgmma_product<BQ, D / 16>(
        ds, [&](int ks) { return k_major_desc<BK, D>(sV, wg * 64, ks); },
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
    // dK += dS^T Q (scaled at the end); with DQ, after the dS barrier, so that dK and dQ run together
    // while the barrier waits on dV alone.
    const auto issue_dk = [&] {
      issue_product_of_accumulator<D, BQ / 16>(dk, ds, [&](int ks) { return mn_major_desc<BQ, D>(tq, ks); });
    };
    float dq[D / 2];
    if constexpr (Cfg::DQ) {
      // dQ = dS K for this warpgroup's 64 queries, over the keys of every warpgroup: their dS^T rows meet
      // in the item's tile. Tiles alternate, so one barrier per item suffices: a warpgroup past it has
      // finished the previous item, whose products read the other tile.
      stage_wgmma_accumulator<typename Cfg::DsTile>(smem + ds_offset(item), ds, {1.f, 1.f}, wkey, lane);
      fence_proxy_async();
      named_barrier_sync(1, Cfg::MMA_THREADS);
      issue_dk();
      wgmma_fence();
      wgmma_product<D, BK / 16, 1, 1>(
          dq, [&](int ks) { return mn_major_desc<BK, BQ>(sDS(item) + uint32_t(wg * Cfg::DsTile::kPanelBytes), ks); },
          [&](int ks) { return mn_major_desc<BK, D>(sK, ks); });
      wgmma_commit();
      wgmma_wait<0>(dv, dk, dq);
    } else {
      issue_dk();
      wgmma_wait<0>(dv, dk);
    }
    // This thread read the stage's lse2 and delta rows through the generic proxy; the copy that refills
    // them is in the async proxy, so order the reads before it.
    fence_proxy_async();
    ring.release(item, lane);
    if constexpr (Cfg::DQ) {
      // Stage the slab once the writer's copy of item - 2 has read the stage, in the sums' fragment
      // order (dq_sum_index): each store is one warp's 256 contiguous bytes.
      if (item >= 2) mbarrier_wait(slab_read(wg, item), uint32_t((item >> 1) - 1) & 1u);
      // The index adds up the row's and the column's bit fields: this thread's part, then constants.
      float* staged =
          reinterpret_cast<float*>(smem + slab_offset(wg, item)) + dq_slab_index<D>((warp & 3) * 16 + g, 2 * t);
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          *reinterpret_cast<float2*>(staged + dq_slab_index<D>(8 * half, 8 * j)) =
              make_float2(dq[4 * j + 2 * half], dq[4 * j + 2 * half + 1]);
      fence_proxy_async();  // the bulk copy reads the slab through the async proxy
      __syncwarp();
      if (lane == 0) mbarrier_arrive(slab_staged(wg, item));
    }
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
  named_barrier_sync(1, Cfg::MMA_THREADS);
  stage_wgmma_accumulator<KvTile>(smem, dk, {a.scale, a.scale}, wkey, lane);
  stage_wgmma_accumulator<KvTile>(smem + KvTile::kBytes, dv, {1.f, 1.f}, wkey, lane);
  named_barrier_sync(1, Cfg::MMA_THREADS);
  store_tile<D, BK, Cfg::MMA_THREADS, KvTile>(a.dk + kv_off, kv_stride, k0, a.T, a.d, smem, tid);
  store_tile<D, BK, Cfg::MMA_THREADS, KvTile>(a.dv + kv_off, kv_stride, k0, a.T, a.d, smem + KvTile::kBytes, tid);
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
    wgmma_product<BK, D / 16>(
        p, [&](int ks) { return k_major_desc<BQ, D>(sQ, wg * 64, ks); },
        [&](int ks) { return k_major_desc<BK, D>(stage_k(n), 0, ks); });
    wgmma_commit();
    wgmma_product<BK, D / 16>(
        ds, [&](int ks) { return k_major_desc<BQ, D>(sDO, wg * 64, ks); },
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
