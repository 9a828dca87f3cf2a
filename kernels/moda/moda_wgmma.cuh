// MoDA's group kernels on Hopper warpgroup MMAs (sm_90a). The causal sequence walk is flash
// attention's wgmma walk (wgmma_attend_causal, wgmma_dq_causal) over the folded rows, each row's key
// limit being its token; then every warp walks its own 16 rows' depth columns exactly as the mma.sync
// group kernels do (moda_flash.cuh). A warp's rows of a wgmma accumulator have the mma.sync m16n8
// layout, so the softmax state and dQ carry over from one walk to the other register for register.
// Tiles are PanelTiles (wgmma.cuh); the depth chunks keep the SwizzledTile layout of the mma.sync walk.
#pragma once
#include "kernels/attention/attention_backward_wgmma.cuh"
#include "kernels/attention/attention_forward_wgmma.cuh"
#include "kernels/moda/moda_flash.cuh"

namespace fathom::cuda::moda {

// Shared memory after the Q (and dO) tiles: the sequence walk's KV stages, reused by the depth chunks.
template <class Cfg>
__host__ __device__ constexpr int wgmma_kv_region_bytes(int ring_bytes) {
  return ring_bytes > WarpChunks<Cfg>::kBytes ? ring_bytes : WarpChunks<Cfg>::kBytes;
}
// The forward's: the Q tile, the KV region, then the ring's barriers (outside what the depth chunks reuse).
template <class Cfg>
__host__ __device__ constexpr int forward_wgmma_barriers() {
  return Cfg::QTile::kBytes + wgmma_kv_region_bytes<Cfg>(Cfg::kRingBytes);
}
template <class Cfg>
constexpr int forward_wgmma_smem_bytes() {
  constexpr int bytes = forward_wgmma_barriers<Cfg>() + Cfg::kBarrierBytes;
  static_assert(bytes <= flash::kMaxSmemPerBlock, "the Q tile and the KV ring or depth chunks exceed the limit");
  return bytes;
}
template <class Cfg>
__host__ __device__ constexpr int dq_wgmma_barriers() {
  return 2 * Cfg::QTile::kBytes + wgmma_kv_region_bytes<Cfg>(Cfg::kRingBytes);
}
template <class Cfg>
constexpr int dq_wgmma_smem_bytes() {
  constexpr int bytes = dq_wgmma_barriers<Cfg>() + Cfg::kBarrierBytes;
  static_assert(bytes <= flash::kMaxSmemPerBlock, "the Q/dO tiles and the KV ring or depth chunks exceed the limit");
  return bytes;
}

// The A fragments of a warp's 16 rows (from tile row r0) of a Q or dO tile.
template <class Tile, int D>
__device__ __forceinline__ void load_mtile_fragments(uint32_t (&f)[1][D / 16][4], uint32_t tile, int r0, int lane) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) Tile::load_a(f[0][ks], tile, r0, ks * 16, lane);
}

// The wgmma row state of a warp's rows as the mma.sync walk's SoftmaxState<D, 1>, and back.
template <int D>
__device__ __forceinline__ void to_mtile_state(flash::SoftmaxState<D, 1>& one, const flash::WgmmaRowState<D>& st) {
#pragma unroll
  for (int half = 0; half < 2; ++half) one.m[0][half] = st.m[half], one.l[0][half] = st.l[half];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) one.o[0][j][e] = st.o[4 * j + e];
}
template <int D>
__device__ __forceinline__ void from_mtile_state(flash::WgmmaRowState<D>& st, const flash::SoftmaxState<D, 1>& one) {
#pragma unroll
  for (int half = 0; half < 2; ++half) st.m[half] = one.m[0][half], st.l[half] = one.l[0][half];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[4 * j + e] = one.o[0][j][e];
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    moda_forward_wgmma_kernel(const ModaArgs a, const __grid_constant__ flash::KvMaps maps) {
#if FATHOM_WGMMA_DEVICE
  constexpr int D = Cfg::D;
  using QTile = typename Cfg::QTile;
  char* smem = flash::wgmma_shared();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
  const TileRows tr = tile_rows(a);
  const uint32_t sQ = flash::smem_addr(smem), ring = sQ + QTile::kBytes;
  load_query_rows<Cfg, QTile>(sQ, a.q, a, tr, tid);
  flash::cp_async_commit();

  const int r0 = warp * 16;  // this warp's m-tile; the thread's rows are r0 + g and r0 + g + 8
  const int limit[2] = {tr.token(r0 + g), tr.token(r0 + g + 8)};
  flash::WgmmaRowState<D> st;
  st.init();
  flash::wgmma_attend_causal<Cfg>(st, sQ, ring, sQ + uint32_t(forward_wgmma_barriers<Cfg>()), maps, tr.hk, tr.b, tr.t0,
                                  tr.t_end, limit, a.scale_log2, tid);
  __syncthreads();  // every warpgroup is done with the ring: it becomes the warps' depth chunks

  uint32_t q1[1][D / 16][4];
  load_mtile_fragments<QTile, D>(q1, sQ, r0, lane);
  flash::SoftmaxState<D, 1> one;
  to_mtile_state(one, st);
  attend_mtile_depth<Cfg>(one, q1, depth_source<Cfg>(a, tr), a, tr, r0,
                          ring + uint32_t(warp * WarpChunks<Cfg>::kWarpBytes), lane);
  from_mtile_state(st, one);

  float inv[2], lse[2];
  st.finish(inv, lse);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + g + 8 * half;
    if ((lane & 3) == 0 && tr.valid(r)) a.lse[stat_index(tr, a.Hq, a.T, r)] = lse[half];
  }
  // Each warp stages only its own rows of the Q tile, which only it still reads; its lanes all
  // finish reading them before any lane overwrites them.
  __syncwarp();
  flash::stage_wgmma_accumulator<QTile>(smem, st.o, inv, r0, lane);
  __syncthreads();
  flash::store_rows<D, Cfg::BQ, Cfg::THREADS, QTile>(
      [&](int r) -> bf16_t* { return tr.valid(r) ? a.o + row_offset(a, tr, r) : nullptr; }, a.d, smem, tid);
#else
  __trap();  // launched only from builds that target sm_90a
#endif
}

// dQ; with DG (G <= 16) also the depth dK/dV of each chunk.
template <class Cfg, DepthGrads DG>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    moda_backward_dq_wgmma_kernel(const ModaArgs a, const __grid_constant__ flash::KvMaps maps) {
#if FATHOM_WGMMA_DEVICE
  constexpr int D = Cfg::D;
  using QTile = typename Cfg::QTile;
  char* smem = flash::wgmma_shared();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
  const TileRows tr = tile_rows(a);
  const uint32_t sQ = flash::smem_addr(smem), sDO = sQ + QTile::kBytes, ring = sDO + QTile::kBytes;
  load_query_rows<Cfg, QTile>(sQ, a.q, a, tr, tid);
  load_query_rows<Cfg, QTile>(sDO, a.dout, a, tr, tid);
  flash::cp_async_commit();

  const int r0 = warp * 16;
  const int limit[2] = {tr.token(r0 + g), tr.token(r0 + g + 8)};
  // Padding rows: lse2 = +inf makes their probabilities 0.
  float lse2[1][2], delta[1][2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + g + 8 * half;
    const bool valid = tr.valid(r);
    lse2[0][half] = valid ? a.lse2[stat_index(tr, a.Hq, a.Tpad, r)] : INFINITY;
    delta[0][half] = valid ? a.delta[stat_index(tr, a.Hq, a.Tpad, r)] : 0.f;
  }
  float dq[1][D / 8][4];
  auto& dq_flat = *reinterpret_cast<float(*)[D / 2]>(&dq);  // the same registers in the wgmma layout
  if (a.dq_seq != nullptr) {                                // the sequence columns' sums, from flash's dK/dV pass
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + g + 8 * half;
      const int64_t row = tr.valid(r) ? stat_index(tr, a.Hq, a.Tpad, r) : -1;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const float2 x =
            row >= 0 ? *reinterpret_cast<const float2*>(a.dq_seq + flash::dq_sum_index<D>(row, 8 * j + 2 * (lane & 3)))
                     : make_float2(0.f, 0.f);
        dq_flat[4 * j + 2 * half] = x.x, dq_flat[4 * j + 2 * half + 1] = x.y;
      }
    }
    flash::cp_async_wait<0>();  // the Q and dO tiles
    __syncthreads();
  } else {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dq_flat[i] = 0.f;
    flash::wgmma_dq_causal<Cfg>(dq_flat, sQ, sDO, ring, sQ + uint32_t(dq_wgmma_barriers<Cfg>()), maps, tr.hk, tr.b,
                                tr.t0, tr.t_end, limit, lse2[0], delta[0], a.scale_log2, tid);
  }
  // Every warp is done with the ring here (the walk returns so): it becomes the warps' depth chunks.

  uint32_t q1[1][D / 16][4], d1[1][D / 16][4];
  load_mtile_fragments<QTile, D>(q1, sQ, r0, lane);
  load_mtile_fragments<QTile, D>(d1, sDO, r0, lane);
  dq_mtile_depth<Cfg, DG, QTile>(dq, q1, d1, lse2, delta, depth_source<Cfg>(a, tr), a, tr, r0,
                                 ring + uint32_t(warp * WarpChunks<Cfg>::kWarpBytes), sQ, sDO, lane);

  // Each warp overwrites only its own rows of the Q tile; its depth walk read only those too, and
  // its lanes all finish reading them before any lane overwrites them.
  __syncwarp();
  flash::stage_wgmma_accumulator<QTile>(smem, dq_flat, {a.scale, a.scale}, r0, lane);
  __syncthreads();
  flash::store_rows<D, Cfg::BQ, Cfg::THREADS, QTile>(
      [&](int r) -> bf16_t* { return tr.valid(r) ? a.dq + row_offset(a, tr, r) : nullptr; }, a.d, smem, tid);
#else
  __trap();  // launched only from builds that target sm_90a
#endif
}

}  // namespace fathom::cuda::moda
