// Kernel configurations per head-dim width and the launchers that size grids and shared memory for
// them. Kept apart from flash_attention.cu so a tuning program can instantiate other configurations.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "core/error.h"
#include "kernels/attention/attention_backward.cuh"
#include "kernels/attention/attention_backward_wgmma.cuh"
#include "kernels/attention/attention_forward_wgmma.cuh"
#include "kernels/hopper/tma_map.h"

namespace fathom::cuda::flash {

// TODO(runtime): replace with the shared CUDA_CHECK once the CUDA runtime lands.
inline void check_cuda(cudaError_t err, const char* what) {
  FATHOM_CHECK(err == cudaSuccess, "flash attention: ", what, " failed: ", cudaGetErrorString(err));
}

template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
             "raising the shared-memory limit");
}

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Whether a configuration describes warpgroup (wgmma) tiles rather than warp (mma.sync) tiles.
template <class Cfg>
concept WarpgroupTiles = requires {
  Cfg::WARPGROUPS;
};

// The kernels a configuration describes, and the dQ kernel's shared memory.
template <class Cfg>
constexpr auto forward_kernel() {
  if constexpr (WarpgroupTiles<Cfg>)
    return flash_forward_wgmma_kernel<Cfg>;
  else
    return flash_forward_kernel<Cfg>;
}
template <class Cfg>
constexpr auto dkdv_kernel() {
  if constexpr (WarpgroupTiles<Cfg>)
    return flash_backward_dkdv_wgmma_kernel<Cfg>;
  else
    return flash_backward_dkdv_kernel<Cfg>;
}
template <class Cfg>
constexpr auto dq_kernel() {
  if constexpr (WarpgroupTiles<Cfg>)
    return flash_backward_dq_wgmma_kernel<Cfg>;
  else
    return flash_backward_dq_kernel<Cfg>;
}
template <class Cfg>
constexpr int dq_kernel_smem_bytes() {
  if constexpr (WarpgroupTiles<Cfg>)
    return Cfg::kSmemBytes;
  else
    return dq_smem_bytes<Cfg>();
}

// Launches a configuration's kernel with `smem` bytes of shared memory: a warpgroup kernel also takes
// its TMA tensor maps, made by maps() (the mma.sync kernels take none).
template <class Cfg, class Kernel, class Args, class Maps>
void launch_tiles(Kernel kernel, dim3 grid, int smem, cudaStream_t stream, const Args& a, Maps&& maps,
                  const char* what) {
  allow_smem(kernel, smem);
  if constexpr (WarpgroupTiles<Cfg>)
    kernel<<<grid, Cfg::THREADS, smem, stream>>>(a, maps());
  else
    kernel<<<grid, Cfg::THREADS, smem, stream>>>(a);
  check_cuda(cudaGetLastError(), what);
}

template <class Cfg>
void launch_forward(const ForwardArgs& a, cudaStream_t stream) {
  launch_tiles<Cfg>(
      forward_kernel<Cfg>(), dim3(ceil_div(a.T, Cfg::BQ), a.B * a.Hq), Cfg::kSmemBytes, stream, a,
      [&] { return kv_maps(a.k, a.v, a.B, a.T, a.Hk, a.d, Cfg::BK); }, "the forward kernel launch");
}

inline void launch_backward_prepare(const BackwardArgs& a, cudaStream_t stream) {
  constexpr int kLanes = 8;  // 16 bytes each: a row of d <= 128 in one pass
  const int64_t threads = int64_t(a.B) * a.Tpad * a.Hq * kLanes;
  flash_backward_prepare_kernel<kLanes><<<unsigned((threads + 255) / 256), 256, 0, stream>>>(a);
  check_cuda(cudaGetLastError(), "the backward prepare kernel launch");
}

// The dK/dV pass with the G query heads of each KV head split over `splits` CTAs (1: no split; more
// needs a.dk_part and a.dv_part and adds the reduction).
template <class Cfg>
void launch_backward_dkdv(const BackwardArgs& a, cudaStream_t stream, int splits = 1) {
  const dim3 grid(ceil_div(a.T, Cfg::BK), a.B * a.Hk, splits);  // key_block's order
  auto maps = [&] {
    return QdoMaps{head_rows_map(a.q, a.B, a.T, a.Hq, a.d, Cfg::BQ),
                   head_rows_map(a.dout, a.B, a.T, a.Hq, a.d, Cfg::BQ)};
  };
  launch_tiles<Cfg>(dkdv_kernel<Cfg>(), grid, Cfg::kSmemBytes, stream, a, maps, "the dK/dV kernel launch");
  if (splits > 1) {
    const int64_t threads = int64_t(a.B) * a.T * a.Hk * a.d / 4;
    flash_backward_reduce_kernel<<<unsigned((threads + 255) / 256), 256, 0, stream>>>(a, splits);
    check_cuda(cudaGetLastError(), "the dK/dV reduction launch");
  }
}

// The dK/dV pass of a configuration that also forms dQ (Cfg::DQ), never split: clears the dQ slabs'
// counters and the CTAs' ticket first. The fp32 sums it leaves in a.dq_acc become dQ through
// launch_backward_dq_convert (or MoDA's depth pass).
template <class Cfg>
void launch_backward_dkdv_dq(const BackwardArgs& a, cudaStream_t stream) {
  static_assert(Cfg::DQ, "a dK/dV configuration with dQ");
  check_cuda(cudaMemsetAsync(a.dq_turn, 0, dq_counters(a.B, a.Hq, a.Tpad) * sizeof(int), stream),
             "clearing the dQ counters");
  launch_backward_dkdv<Cfg>(a, stream);
}
// dQ from the fp32 sums of rows W floats wide.
template <int W>
void launch_backward_dq_convert(const BackwardArgs& a, cudaStream_t stream) {
  const int64_t threads = int64_t(a.B) * a.T * a.Hq * a.d / 4;
  flash_backward_dq_convert_kernel<W><<<unsigned((threads + 255) / 256), 256, 0, stream>>>(a);
  check_cuda(cudaGetLastError(), "the dQ conversion launch");
}

template <class Cfg>
void launch_backward_dq(const BackwardArgs& a, cudaStream_t stream) {
  launch_tiles<Cfg>(
      dq_kernel<Cfg>(), dim3(ceil_div(a.T, Cfg::BQ), a.B * a.Hq), dq_kernel_smem_bytes<Cfg>(), stream, a,
      [&] { return kv_maps(a.k, a.v, a.B, a.T, a.Hk, a.d, Cfg::BK); }, "the dQ kernel launch");
}

// The configurations fathom runs, by head-dim width D (d <= D), chosen by bench/tune_attention.cu
// on an H200 (bench/results/2026-11-29_attention.md):
//   ForwardConfig<D, WARPS, MT, BK, MIN_BLOCKS>, DkDvConfig<D, WARPS, BQ, KV_IN_REGS, MIN_BLOCKS>.
// The dQ pass reuses ForwardConfig's tiling (query tile of WARPS * MT * 16 rows, KV blocks of BK).
// Widths 64 and 128 also have warpgroup (wgmma) configurations:
//   WgmmaForwardConfig<D, BK, WARPGROUPS, MIN_BLOCKS, STAGES>, WgmmaDkDvConfig<D, BQ, WARPGROUPS, MIN_BLOCKS, STAGES>,
//   WgmmaDqConfig<D, BK, WARPGROUPS, MIN_BLOCKS, STAGES>.
template <int D>
struct Configs;
template <>
struct Configs<32> {
  using Forward = ForwardConfig<32, 4, 2, 64, 2>;
  using DkDv = DkDvConfig<32, 4, 64, true, 2>;
  using Dq = ForwardConfig<32, 4, 2, 32, 2>;
};
template <>
struct Configs<64> {
  using Forward = ForwardConfig<64, 4, 2, 64, 1>;
  using DkDv = DkDvConfig<64, 4, 64, true, 2>;
  using Dq = ForwardConfig<64, 4, 2, 32, 2>;
  using WgmmaForward = WgmmaForwardConfig<64, 128, 3, 1, 4>;
  using WgmmaDkDv = WgmmaDkDvConfig<64, 128, 2, 1, 2>;
  using WgmmaDkDvDq = WgmmaDkDvConfig<64, 128, 2, 1, 2, true>;
  using WgmmaDq = WgmmaDqConfig<64, 128, 2, 1, 2>;
};
template <>
struct Configs<128> {
  using Forward = ForwardConfig<128, 8, 1, 64, 1>;
  using DkDv = DkDvConfig<128, 4, 64, false, 2>;
  using Dq = ForwardConfig<128, 8, 1, 64, 1>;
  using WgmmaForward = WgmmaForwardConfig<128, 128, 2, 1, 3>;
  using WgmmaDkDv = WgmmaDkDvConfig<128, 64, 1, 2, 2>;
  using WgmmaDq = WgmmaDqConfig<128, 128, 2, 1, 2>;
};

// The kernels flash attention runs at width D: the wgmma ones where the width has them and the build
// targets sm_90a (FATHOM_WGMMA), else the mma.sync ones.
template <int D>
struct Fastest {
  using Forward = typename Configs<D>::Forward;
  using DkDv = typename Configs<D>::DkDv;
  using Dq = typename Configs<D>::Dq;
};
#if defined(FATHOM_WGMMA)
template <int D>
requires requires { typename Configs<D>::WgmmaForward; }
struct Fastest<D> {
  using Forward = typename Configs<D>::WgmmaForward;
  using DkDv = typename Configs<D>::WgmmaDkDv;
  using Dq = typename Configs<D>::WgmmaDq;
};
#endif

// The dK/dV configuration that also forms dQ at width D, replacing the dQ pass, or void where there is
// none (the mma.sync kernels; d = 128, whose dQ slab would not leave room for two CTAs per SM). The
// backward scratch says whether a call uses it (dq_width > 0).
template <int D>
struct FusedDq {
  using type = void;
};
#if defined(FATHOM_WGMMA)
template <int D>
requires requires { typename Configs<D>::WgmmaDkDvDq; }
struct FusedDq<D> {
  using type = typename Configs<D>::WgmmaDkDvDq;
};
#endif

// Runs f.template operator()<D>() for the narrowest width that holds head dim d (d <= 128).
template <class F>
void dispatch_width(int d, F&& f) {
  if (d <= 32) return f.template operator()<32>();
  if (d <= 64) return f.template operator()<64>();
  return f.template operator()<128>();
}

// The backward scratch of a call with head dim d, for the dK/dV configuration fathom runs at that width:
// the one that also forms dQ where there is one and the caller takes its sums (`takes_dq_sums`).
inline BackwardScratch backward_scratch_for(int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t d,
                                            bool takes_dq_sums = true) {
  int bk = 0, dq_width = 0;
  dispatch_width(int(d), [&]<int D>() {
    bk = Fastest<D>::DkDv::BK;
    if constexpr (!std::is_void_v<typename FusedDq<D>::type>) dq_width = takes_dq_sums ? D : 0;
  });
  return backward_scratch(B, T, Hq, Hk, d, bk, dq_width);
}

// Runs the dK/dV pass that `scratch` was sized for at width D: the one that also forms dQ where the
// scratch holds its sums (returns true, the sums are in a.dq_acc), else the one without (returns false;
// a dQ pass must follow).
template <int D>
bool launch_backward_dkdv_pass(const BackwardArgs& a, cudaStream_t stream, const BackwardScratch& scratch) {
  if constexpr (!std::is_void_v<typename FusedDq<D>::type>) {
    if (scratch.dq_width > 0) {
      launch_backward_dkdv_dq<typename FusedDq<D>::type>(a, stream);
      return true;
    }
  }
  launch_backward_dkdv<typename Fastest<D>::DkDv>(a, stream, scratch.splits);
  return false;
}

// Flash attention's dK/dV and dQ at width D after the prepare pass: the dK/dV pass, then either the
// conversion of the dQ sums it formed or the dQ pass.
template <int D>
void launch_backward_passes(const BackwardArgs& a, cudaStream_t stream, const BackwardScratch& scratch) {
  if (!launch_backward_dkdv_pass<D>(a, stream, scratch)) return launch_backward_dq<typename Fastest<D>::Dq>(a, stream);
  if constexpr (!std::is_void_v<typename FusedDq<D>::type>) launch_backward_dq_convert<D>(a, stream);
}

}  // namespace fathom::cuda::flash
