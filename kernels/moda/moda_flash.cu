// Launchers of the flash-style MoDA kernels (flat, chunk, group); the kernels are in moda_flash.cuh and,
// for group on sm_90a builds, moda_wgmma.cuh.
#include <algorithm>

#include "kernels/attention/attention_launch.cuh"
#include "kernels/moda/moda_flash.cuh"
#include "kernels/moda/moda_kernels.cuh"
#include "kernels/moda/moda_wgmma.cuh"

namespace fathom::cuda::moda {

namespace {

using flash::Configs;
using flash::dev;

// The MoDA kernels run the full-width configurations only: d = 64 or 128 (checked by the caller).
template <class F>
void dispatch_head_dim(int64_t d, F&& f) {
  if (d == 64) return f.template operator()<64>();
  return f.template operator()<128>();
}

// The group kernel's warpgroup configurations: flash attention's, over folded rows.
template <int D>
struct GroupWgmma {
  using Forward = typename flash::Configs<D>::WgmmaForward;
  using Dq = typename flash::Configs<D>::WgmmaDq;
};
#if defined(FATHOM_WGMMA)
constexpr bool kGroupOnWgmma = true;
#else
constexpr bool kGroupOnWgmma = false;
#endif

// Geometry of a call for query tiles of BQ rows (pointers are filled in by the caller).
ModaArgs geometry(ModaKernel kernel, const ModaShape& m, int bq) {
  const FlashShape& s = m.seq;
  ModaArgs a{};
  a.B = int(s.B), a.T = int(s.T), a.Hq = int(s.Hq), a.Hk = int(s.Hk), a.G = int(s.Hq / s.Hk), a.d = int(s.d);
  a.S = int(m.slots), a.begin = int(m.slot_begin), a.L = int(m.slot_end - m.slot_begin);
  a.fold = kernel == ModaKernel::group ? a.G : 1;
  // Units of whole tokens (moda_flash.cuh): one m-tile of 16 / fold tokens, or one token per
  // multiple of 16 rows.
  a.unit = a.fold <= 16 ? 16 : (a.fold + 15) / 16 * 16;
  a.per_unit = a.fold <= 16 ? 16 / a.fold : 1;
  a.tokens = bq / a.unit * a.per_unit;
  a.by_L = make_fast_div(std::max(a.L, 1));
  a.by_fold = make_fast_div(a.fold);
  a.by_unit = make_fast_div(a.unit);
  a.all_depth = kernel == ModaKernel::flat;
  a.scale = float(s.scale);
  a.scale_log2 = float(s.scale * double(flash::kLog2e));
  return a;
}

dim3 grid_of(const ModaArgs& a) {
  return dim3(unsigned((a.T + a.tokens - 1) / a.tokens), unsigned(a.B * (a.Hq / a.fold)));
}

// Launches a MoDA kernel over the call's tiles with `smem` bytes of dynamic shared memory; `more`
// are the kernel's parameters after the arguments.
template <class Kernel, class... More>
void launch_on_tiles(Kernel kernel, int threads, int smem, const ModaArgs& a, cudaStream_t stream,
                     const More&... more) {
  flash::allow_smem(kernel, smem);
  kernel<<<grid_of(a), threads, smem, stream>>>(a, more...);
}

// Whether `kernel` runs on the warpgroup kernels (moda_wgmma.cuh). Its backward then takes the
// sequence dQ from a dK/dV pass that also forms dQ, where there is one.
bool on_wgmma(ModaKernel kernel) { return kGroupOnWgmma && kernel == ModaKernel::group; }

flash::BackwardScratch scratch_of(ModaKernel kernel, const ModaShape& m) {
  const FlashShape& s = m.seq;
  return flash::backward_scratch_for(s.B, s.T, s.Hq, s.Hk, s.d, on_wgmma(kernel));
}

}  // namespace

int group_max_heads(int64_t d) {
  int bq = 0;  // the query-tile rows of the configurations the group kernel launches
  dispatch_head_dim(d, [&]<int D>() {
    if constexpr (kGroupOnWgmma)
      bq = std::min(GroupWgmma<D>::Forward::BQ, GroupWgmma<D>::Dq::BQ);
    else
      bq = std::min(Configs<D>::Forward::BQ, Configs<D>::Dq::BQ);
  });
  return bq;
}

size_t flash_backward_workspace_bytes(ModaKernel kernel, const ModaShape& m) { return scratch_of(kernel, m).bytes(); }

void flash_forward(ModaKernel kernel, const ModaParams& p, cudaStream_t stream) {
  // The forward's arguments for query tiles of bq rows.
  auto args = [&](int bq) {
    ModaArgs a = geometry(kernel, p.shape, bq);
    a.q = dev(p.q), a.k = dev(p.k), a.v = dev(p.v), a.kd = dev(p.depth_k), a.vd = dev(p.depth_v);
    a.o = dev(p.o), a.lse = p.lse;
    return a;
  };
  dispatch_head_dim(p.shape.seq.d, [&]<int D>() {
    if (on_wgmma(kernel)) {
      using Cfg = typename GroupWgmma<D>::Forward;
      const ModaArgs a = args(Cfg::BQ);
      launch_on_tiles(moda_forward_wgmma_kernel<Cfg>, Cfg::THREADS, forward_wgmma_smem_bytes<Cfg>(), a, stream,
                      flash::kv_maps(p.k, p.v, a.B, a.T, a.Hk, a.d, Cfg::BK));
      flash::check_cuda(cudaGetLastError(), "the MoDA forward kernel launch");
      return;
    }
    using Cfg = typename Configs<D>::Forward;
    const ModaArgs a = args(Cfg::BQ);
    auto launch = [&]<bool WARP_DEPTH>() {
      launch_on_tiles(moda_forward_kernel<Cfg, WARP_DEPTH>, Cfg::THREADS, forward_smem_bytes<Cfg, WARP_DEPTH>(), a,
                      stream);
      flash::check_cuda(cudaGetLastError(), "the MoDA forward kernel launch");
    };
    if (kernel == ModaKernel::group)
      launch.template operator()<true>();
    else
      launch.template operator()<false>();
  });
}

void flash_backward(ModaKernel kernel, const ModaBackwardParams& p, cudaStream_t stream) {
  const ModaShape& m = p.shape;
  const FlashShape& s = m.seq;
  // Flash attention's prepare (lse2, delta) and sequence dK/dV passes, unchanged: with the joint
  // log-sum-exp their probabilities are the sequence columns of the joint softmax.
  flash::BackwardArgs fa{dev(p.q),         dev(p.k), dev(p.v),       dev(p.o),
                         dev(p.grad_o),    p.lse,    dev(p.dq),      dev(p.dk),
                         dev(p.dv),        nullptr,  nullptr,        int(s.B),
                         int(s.T),         0,        int(s.Hq),      int(s.Hk),
                         int(s.Hq / s.Hk), int(s.d), float(s.scale), float(s.scale * double(flash::kLog2e))};
  const flash::BackwardScratch scratch = scratch_of(kernel, m);
  scratch.place(fa, p.workspace);
  flash::launch_backward_prepare(fa, stream);
  dispatch_head_dim(s.d, [&]<int D>() {
    const bool wgmma = on_wgmma(kernel);
    const bool seq_dq_done = flash::launch_backward_dkdv_pass<D>(fa, stream, scratch);

    using Cfg = typename Configs<D>::Dq;
    using WgmmaCfg = typename GroupWgmma<D>::Dq;
    ModaArgs a = geometry(kernel, m, wgmma ? WgmmaCfg::BQ : Cfg::BQ);
    a.q = dev(p.q), a.k = dev(p.k), a.v = dev(p.v), a.kd = dev(p.depth_k), a.vd = dev(p.depth_v);
    a.dout = dev(p.grad_o), a.dq = dev(p.dq), a.lse2 = fa.lse2, a.delta = fa.delta, a.Tpad = fa.Tpad;
    a.ddk = p.d_depth_k, a.ddv = p.d_depth_v, a.store_depth = p.store_depth_grads;
    a.ddk_bf16 = dev(p.d_depth_k_bf16), a.ddv_bf16 = dev(p.d_depth_v_bf16);
    a.wp = p.depth_weights_p, a.wds = p.depth_weights_ds;
    a.dq_seq = seq_dq_done ? fa.dq_acc : nullptr;
    auto launch = [&]<bool WARP_DEPTH, DepthGrads DG>(const char* what) {
      if (wgmma)
        launch_on_tiles(moda_backward_dq_wgmma_kernel<WgmmaCfg, DG>, WgmmaCfg::THREADS, dq_wgmma_smem_bytes<WgmmaCfg>(),
                        a, stream, flash::kv_maps(p.k, p.v, a.B, a.T, a.Hk, a.d, WgmmaCfg::BK));
      else
        launch_on_tiles(moda_backward_dq_kernel<Cfg, WARP_DEPTH, DG>, Cfg::THREADS, dq_smem_bytes<Cfg, WARP_DEPTH>(), a,
                        stream);
      flash::check_cuda(cudaGetLastError(), what);
    };
    // group with G <= 16 adds the depth dK/dV in its walk: an m-tile holds all rows of its tokens.
    if (kernel == ModaKernel::group && a.G <= 16) {
      if (a.wp != nullptr)
        launch.template operator()<true, DepthGrads::weights>("the MoDA dQ + depth weights kernel launch");
      else if (a.ddk_bf16 != nullptr)
        launch.template operator()<true, DepthGrads::bf16>("the MoDA dQ + depth dK/dV kernel launch");
      else
        launch.template operator()<true, DepthGrads::f32>("the MoDA dQ + depth dK/dV kernel launch");
      return;
    }
    if (kernel == ModaKernel::group)
      launch.template operator()<true, DepthGrads::none>("the MoDA dQ kernel launch");
    else
      launch.template operator()<false, DepthGrads::none>("the MoDA dQ kernel launch");
    if (a.L == 0) return;
    const int64_t units = int64_t(a.B) * a.T * a.Hk * ((a.L + 15) / 16);  // warps: 16 slots each
    constexpr int smem = depth_grads_smem_bytes<D>();
    flash::allow_smem(moda_depth_grads_kernel<D>, smem);
    moda_depth_grads_kernel<D>
        <<<unsigned((units + kDepthGradWarps - 1) / kDepthGradWarps), kDepthGradWarps * 32, smem, stream>>>(a);
    flash::check_cuda(cudaGetLastError(), "the MoDA depth dK/dV kernel launch");
  });
}

}  // namespace fathom::cuda::moda
