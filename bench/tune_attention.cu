// Tile-size sweep for the flash-attention kernels: times each kernel (forward, dK/dV, dQ) in several
// configurations at the benchmark sizes and checks every variant against the shipped configuration
// (relative L2 of its output). Used to choose kernels/attention/attention_launch.cuh's Configs; not part of
// the CMake build (each configuration is a separate kernel instantiation, slow to compile). Build it
// with scripts/build_attention_device.sh OUT_DIR --tune.
// Usage: tune_attention [T for the d = 64 sweep, default 16384]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/attention/attention_launch.cuh"
#include "kernels/attention/flash_attention.h"

using namespace fathom::cuda::flash;

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "tune_attention: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

__global__ void fill_random(bf16_t* x, size_t n, uint32_t seed, float amplitude) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed * 0x85EBCA77u ^ uint32_t(i >> 32);
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    x[i] = __float2bfloat16(amplitude * (float(h >> 8) / 8388608.f - 1.f));
  }
}

// Sums (a - b)^2 and b^2 (bf16 or f32 inputs) into sums[0], sums[1].
template <class T>
__global__ void diff_norms(const T* a, const T* b, size_t n, double* sums) {
  double num = 0, den = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const double x = double(float(a[i])), y = double(float(b[i]));
    num += (x - y) * (x - y);
    den += y * y;
  }
  atomicAdd(&sums[0], num);
  atomicAdd(&sums[1], den);
}

template <class T>
double rel_l2(const T* a, const T* b, size_t n) {
  double* sums;
  check(cudaMalloc(&sums, 16), "malloc");
  check(cudaMemset(sums, 0, 16), "memset");
  diff_norms<<<1024, 256>>>(a, b, n, sums);
  double h[2];
  check(cudaMemcpy(h, sums, 16, cudaMemcpyDeviceToHost), "copy");
  cudaFree(sums);
  return std::sqrt(h[0] / std::max(h[1], 1e-30));
}

struct Problem {
  int B, T, Hq, Hk, d;
  size_t nq, nkv;
  bf16_t *q, *k, *v, *dout, *o, *dq, *dk, *dv, *o_ref, *dq_ref, *dk_ref, *dv_ref;
  float *lse, *ws;
  ForwardArgs fa;
  BackwardArgs ba;

  Problem(int B_, int T_, int Hq_, int Hk_, int d_) : B(B_), T(T_), Hq(Hq_), Hk(Hk_), d(d_) {
    nq = size_t(B) * T * Hq * d;
    nkv = size_t(B) * T * Hk * d;
    for (bf16_t** p : {&q, &dout, &o, &dq, &o_ref, &dq_ref}) check(cudaMalloc(p, nq * 2), "malloc");
    for (bf16_t** p : {&k, &v, &dk, &dv, &dk_ref, &dv_ref}) check(cudaMalloc(p, nkv * 2), "malloc");
    check(cudaMalloc(&lse, size_t(B) * Hq * T * 4), "malloc");
    const fathom::cuda::FlashShape shape{B, T, Hq, Hk, d, 1.0 / std::sqrt(double(d))};
    check(cudaMalloc(&ws, fathom::cuda::flash_backward_workspace_bytes(shape)), "malloc");
    fill_random<<<1024, 256>>>(q, nq, 1, 2.f);
    fill_random<<<1024, 256>>>(k, nkv, 2, 2.f);
    fill_random<<<1024, 256>>>(v, nkv, 3, 1.f);
    fill_random<<<1024, 256>>>(dout, nq, 4, 1.f);
    const int Tpad = (T + kRowPad - 1) / kRowPad * kRowPad;
    const float scale = float(shape.scale), scale_log2 = float(shape.scale * double(kLog2e));
    fa = ForwardArgs{q, k, v, o_ref, lse, B, T, Hq, Hk, Hq / Hk, d, scale_log2};
    ba = BackwardArgs{q,       k, v, o_ref, dout, lse, dq_ref,  dk_ref, dv_ref, nullptr,
                      nullptr, B, T, Tpad,  Hq,   Hk,  Hq / Hk, d,      scale,  scale_log2};
    backward_scratch_for(B, T, Hq, Hk, d).place(ba, ws);  // dq_acc and dq_turn where the shipped pass uses them
    if (ba.dq_acc == nullptr) {  // so that the sweep can time dQ in the dK/dV pass at any shape and width
      const size_t rows = size_t(B) * Hq * Tpad;
      check(cudaMalloc(&ba.dq_acc, rows * 128 * sizeof(float)), "malloc");
      check(cudaMalloc(&ba.dq_turn, dq_counters(B, Hq, Tpad) * sizeof(int)), "malloc");
      ba.dq_ticket = ba.dq_turn + dq_slabs(B, Hq, Tpad);
    }
    // The shipped configuration gives the reference outputs every variant is compared with.
    dispatch_width(d, [&]<int D>() {
      launch_forward<typename Configs<D>::Forward>(fa, nullptr);
      launch_backward_prepare(ba, nullptr);
      launch_backward_dkdv<typename Configs<D>::DkDv>(ba, nullptr);
      launch_backward_dq<typename Configs<D>::Dq>(ba, nullptr);
    });
    check(cudaDeviceSynchronize(), "reference run");
    fa.o = o;
    ba.dq = dq;
    ba.dk = dk;
    ba.dv = dv;
  }
  double forward_flops() const { return 2.0 * B * Hq * double(T) * T * d; }
};

template <class F>
double median_ms(F&& f) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int rep = -2; rep < 10; ++rep) {
    cudaEventRecord(e0);
    f();
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "timed run");
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (rep >= 0) ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void report(const char* kind, const char* cfg, double ms, double flops, double err) {
  std::printf("| %s | %s | %.3f | %.1f | %.2e |\n", kind, cfg, ms, flops / ms * 1e-9, err);
  std::fflush(stdout);
}

template <class Cfg>
void forward_variant(Problem& p, const char* name) {
  const double ms = median_ms([&] { launch_forward<Cfg>(p.fa, nullptr); });
  report("fwd", name, ms, p.forward_flops(), rel_l2(p.o, p.o_ref, p.nq));
}
// dK/dV does 4 of the backward's products (QK^T, dO V^T, P^T dO, dS^T Q): 2x the forward's FLOPs.
template <class Cfg>
void dkdv_variant(Problem& p, const char* name) {
  const double ms = median_ms([&] { launch_backward_dkdv<Cfg>(p.ba, nullptr); });
  report("dkdv", name, ms, 2.0 * p.forward_flops(),
         std::max(rel_l2(p.dk, p.dk_ref, p.nkv), rel_l2(p.dv, p.dv_ref, p.nkv)));
}
// dQ does 3 (QK^T, dO V^T, dS K): 1.5x.
template <class Cfg>
void dq_variant(Problem& p, const char* name) {
  const double ms = median_ms([&] { launch_backward_dq<Cfg>(p.ba, nullptr); });
  report("dq", name, ms, 1.5 * p.forward_flops(), rel_l2(p.dq, p.dq_ref, p.nq));
}

// Times a whole backward (prepare excluded; 2.5x the forward's FLOPs by the benchmark's convention)
// and checks its dQ, dK and dV.
template <class Passes>
void report_backward(Problem& p, const char* name, Passes&& passes) {
  const double ms = median_ms(passes);
  report("bwd", name, ms, 2.5 * p.forward_flops(),
         std::max({rel_l2(p.dq, p.dq_ref, p.nq), rel_l2(p.dk, p.dk_ref, p.nkv), rel_l2(p.dv, p.dv_ref, p.nkv)}));
}
// The two passes.
template <class DkDvCfg, class DqCfg>
void backward_variant(Problem& p, const char* name) {
  report_backward(p, name, [&] {
    launch_backward_dkdv<DkDvCfg>(p.ba, nullptr);
    launch_backward_dq<DqCfg>(p.ba, nullptr);
  });
}
// dQ formed in the dK/dV pass (never split), and the conversion of its sums.
template <class Cfg, int W>
void dq_in_dkdv_variant(Problem& p, const char* name) {
  report_backward(p, name, [&] {
    launch_backward_dkdv_dq<Cfg>(p.ba, nullptr);
    launch_backward_dq_convert<W>(p.ba, nullptr);
  });
}

#define FWD(...) forward_variant<ForwardConfig<__VA_ARGS__>>(p, #__VA_ARGS__)
#define DKDV(...) dkdv_variant<DkDvConfig<__VA_ARGS__>>(p, #__VA_ARGS__)
#define DQ(...) dq_variant<ForwardConfig<__VA_ARGS__>>(p, #__VA_ARGS__)
#if defined(FATHOM_WGMMA)
#define WFWD(...) forward_variant<WgmmaForwardConfig<__VA_ARGS__>>(p, "wgmma " #__VA_ARGS__)
#define WDKDV(...) dkdv_variant<WgmmaDkDvConfig<__VA_ARGS__>>(p, "wgmma " #__VA_ARGS__)
#define WDQ(...) dq_variant<WgmmaDqConfig<__VA_ARGS__>>(p, "wgmma " #__VA_ARGS__)
// D first: the sums' width.
#define WDKDV_DQ(D, ...) \
  dq_in_dkdv_variant<WgmmaDkDvConfig<D, __VA_ARGS__, true>, D>(p, "wgmma dK/dV with dQ " #D ", " #__VA_ARGS__)
#else
#define WFWD(...)
#define WDKDV(...)
#define WDQ(...)
#define WDKDV_DQ(...)
#endif

void sweep_d64(int T) {
  std::printf(
      "\n### B=1 T=%d Hq=64 Hk=8 d=64\n\n| kernel | config | ms | TFLOP/s | rel L2 vs shipped "
      "|\n|---|---|---:|---:|---:|\n",
      T);
  Problem p(1, T, 64, 8, 64);
  launch_backward_prepare(p.ba, nullptr);
  FWD(64, 4, 2, 64, 2);
  FWD(64, 4, 2, 64, 1);
  FWD(64, 8, 1, 64, 1);
  FWD(64, 4, 2, 32, 2);
  FWD(64, 8, 1, 128, 1);
  FWD(64, 4, 1, 64, 3);
  DKDV(64, 8, 64, true, 1);
  DKDV(64, 8, 64, false, 1);
  DKDV(64, 4, 64, true, 2);
  DKDV(64, 8, 32, true, 1);
  DKDV(64, 8, 128, false, 1);
  DQ(64, 8, 1, 64, 1);
  DQ(64, 4, 1, 64, 2);
  DQ(64, 4, 2, 32, 2);
  DQ(64, 8, 1, 32, 1);
  DQ(64, 4, 2, 64, 1);
  WFWD(64, 64, 2, 2, 3);
  WFWD(64, 64, 2, 2, 4);
  WFWD(64, 128, 2, 1, 4);
  WFWD(64, 128, 3, 1, 3);
  WFWD(64, 128, 3, 1, 4);
  WFWD(64, 64, 3, 1, 4);
  WFWD(64, 128, 4, 1, 3);
  WDKDV(64, 128, 2, 1, 2);
  WDKDV(64, 128, 2, 1, 4);
  WDKDV(64, 128, 1, 2, 2);
  WDKDV(64, 64, 1, 2, 2);
  WDKDV(64, 64, 2, 1, 4);
  WDQ(64, 128, 2, 1, 2);
  WDQ(64, 128, 2, 1, 4);
  WDQ(64, 128, 1, 2, 2);
  WDQ(64, 64, 2, 1, 4);
  backward_variant<Configs<64>::DkDv, Configs<64>::Dq>(p, "mma.sync");
  backward_variant<Fastest<64>::DkDv, Fastest<64>::Dq>(p, "two passes, unsplit");
#if defined(FATHOM_WGMMA)
  dq_in_dkdv_variant<Configs<64>::WgmmaDkDvDq, 64>(p, "wgmma dK/dV with dQ");
#endif
  // What ships at this size (backward_plan.h): below 192 dK/dV CTAs the two passes with split heads.
  const BackwardScratch plan = backward_scratch_for(1, T, 64, 8, 64);
  report_backward(p, plan.dq_width > 0 ? "shipped: dK/dV with dQ" : "shipped: two passes, split",
                  [&] { launch_backward_passes<64>(p.ba, nullptr, plan); });
}

void sweep_d128(int B, int T) {
  std::printf(
      "\n### B=%d T=%d Hq=32 Hk=32 d=128\n\n| kernel | config | ms | TFLOP/s | rel L2 vs shipped "
      "|\n|---|---|---:|---:|---:|\n",
      B, T);
  Problem p(B, T, 32, 32, 128);
  launch_backward_prepare(p.ba, nullptr);
  FWD(128, 8, 1, 64, 1);
  FWD(128, 4, 1, 64, 2);
  FWD(128, 8, 1, 32, 1);
  FWD(128, 4, 1, 32, 2);
  DKDV(128, 8, 64, false, 1);
  DKDV(128, 4, 64, false, 2);
  DKDV(128, 8, 32, false, 1);
  DKDV(128, 4, 32, false, 2);
  DQ(128, 8, 1, 64, 1);
  DQ(128, 4, 1, 64, 2);
  DQ(128, 8, 1, 32, 1);
  WFWD(128, 128, 2, 1, 3);
  WFWD(128, 64, 2, 1, 4);
  WFWD(128, 64, 1, 2, 4);
  WDKDV(128, 64, 1, 2, 2);
  WDKDV(128, 64, 2, 1, 2);
  WDKDV(128, 64, 2, 1, 4);
  WDQ(128, 128, 2, 1, 2);
  WDQ(128, 64, 1, 2, 2);
  WDQ(128, 64, 2, 1, 2);
  WDQ(128, 64, 2, 1, 4);
  backward_variant<Configs<128>::DkDv, Configs<128>::Dq>(p, "mma.sync");
  backward_variant<Fastest<128>::DkDv, Fastest<128>::Dq>(p, "shipped");
  WDKDV_DQ(128, 64, 1, 1, 2);
}

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 16384;
  sweep_d64(T);
  sweep_d128(8, 2048);
  return 0;
}
