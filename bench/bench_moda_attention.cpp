// MoDA attention benchmark on the GPU (paper Tables 7 and 2): forward and forward + backward times of
// fathom's four MoDA CUDA kernels and of fathom's flash attention without depth at the same shape.
// CUDA events around each pass, warm-up first, median of many runs, fresh random bf16 inputs per
// shape; prints Markdown tables.
//
// Modes:
//   table7  T = 1024, B = 1, G = 8, Hq = 64, Hk = 8, d = 64, L = 64 depth slots: naive / flat / chunk /
//           group forward + backward, and the total speed-up naive / group, beside the paper's A100 times.
//   table2  the group kernel against flash attention without depth (B = 1, d = 64):
//           T in {4K, 8K, 16K, 32K, 64K} at G = 8 (Hq = 64, Hk = 8), L = 64;
//           G in {2, 4, 8, 16, 32} at T = 16K, L = 64, with Hk = 8 fixed and Hq = 8 G (the paper's
//           sweep: its notes give Hq 16 -> 256 with Hk = 8, so the query work grows with G);
//           L in {64, 128, 256} at T = 16K, G = 8; and L = 0 at T = 16K and 64K: the folded kernel
//           with no depth slots, which separates the cost of folding from the cost of depth.
//           The backward stores its depth gradients in bf16, as it returns dk and dv (one call whose
//           depth K/V have no other reader, as the paper times it); the "f32" rows repeat T = 16K and
//           64K storing them in fp32, as a model's first reader does, and the "add" rows adding them to
//           the fp32 buffers' contents, as every later reader does (an fp32 read more per element).
//   all     both.
// FLOPs of the group kernel (forward; backward counted as 2.5x, as for flash attention):
//   sequence (causal half)   2 * 2 * B * Hq * T^2 * d / 2
//   depth (L slots per row)  2 * 2 * B * Hq * T * L * d
// Usage: bench_moda_attention [table7|table2|all] [--min-reps N] [--min-t T] [--max-t T] [--sweep T|G|L|f32|add]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#if FATHOM_WITH_CUDA
#include "bench/cuda_bench_util.h"
#include "core/error.h"
#include "kernels/attention/flash_attention.h"
#include "kernels/moda/moda_launch.h"
#endif

namespace {

#if FATHOM_WITH_CUDA

using fathom::bf16;
using fathom::bench::check;
using fathom::bench::device_alloc;
using fathom::bench::median;
using fathom::bench::random_bf16;
using fathom::bench::upload;
using fathom::cuda::ModaKernel;

// Where the backward puts its depth gradients: stored in bf16 (one call on its own, as the paper times
// it), stored in fp32 (a model's first reader) or added to what fp32 buffers hold (a later reader).
enum class DepthGrads { store_bf16, store_f32, add_f32 };

struct Shape {
  int64_t B, T, Hq, Hk, d, L;
  DepthGrads grads = DepthGrads::store_bf16;
};

double sequence_flops(const Shape& s) {
  return 2.0 * 2.0 * double(s.B * s.Hq) * double(s.T) * double(s.T) * double(s.d) / 2.0;
}
double depth_flops(const Shape& s) { return 2.0 * 2.0 * double(s.B * s.Hq) * double(s.T) * double(s.L) * double(s.d); }

struct Timing {
  double fwd_ms = 0, total_ms = 0;
  int reps = 0;
  std::string error;  // set when the kernel refused the shape
};

// Times `forward` then `backward` on the default stream: warm-up, then at least min_reps runs and
// more while under two seconds (at most 50); medians of the forward and of the sum.
template <class Fwd, class Bwd>
Timing time_passes(int min_reps, Fwd&& forward, Bwd&& backward) {
  cudaEvent_t e0, e1, e2;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  check(cudaEventCreate(&e2), "event");
  std::vector<double> fwd, total;
  double spent_ms = 0;
  for (int rep = -2; rep < min_reps || (spent_ms < 2000 && rep < 50); ++rep) {
    check(cudaEventRecord(e0), "record");
    forward();
    check(cudaEventRecord(e1), "record");
    backward();
    check(cudaEventRecord(e2), "record");
    check(cudaEventSynchronize(e2), "synchronize");
    float f = 0, b = 0;
    check(cudaEventElapsedTime(&f, e0, e1), "elapsed");
    check(cudaEventElapsedTime(&b, e1, e2), "elapsed");
    if (rep < 0) continue;  // warm-up
    fwd.push_back(f);
    total.push_back(f + b);
    spent_ms += f + b;
  }
  check(cudaGetLastError(), "the kernels");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  return {median(fwd), median(total), int(total.size()), ""};
}

// Device buffers of one shape, filled with fresh random bf16 values (seeded by `seed`).
struct Buffers {
  size_t nq, nkv, ndepth, nlse;
  bf16 *q, *k, *v, *dk_in, *dv_in, *grad_o, *o, *dq, *dk, *dv;
  float *lse, *d_depth_k, *d_depth_v;

  Buffers(const Shape& s, uint64_t seed, bool depth)
      : nq(size_t(s.B * s.T * s.Hq * s.d)),
        nkv(size_t(s.B * s.T * s.Hk * s.d)),
        ndepth(depth ? size_t(s.B * s.T * s.L * s.Hk * s.d) : 0),
        nlse(size_t(s.B * s.Hq * s.T)) {
    q = upload(random_bf16(nq, seed, 2.f));
    k = upload(random_bf16(nkv, seed + 1, 2.f));
    v = upload(random_bf16(nkv, seed + 2, 1.f));
    dk_in = depth ? upload(random_bf16(ndepth, seed + 3, 2.f)) : nullptr;
    dv_in = depth ? upload(random_bf16(ndepth, seed + 4, 1.f)) : nullptr;
    grad_o = upload(random_bf16(nq, seed + 5, 1.f));
    o = device_alloc<bf16>(nq);
    dq = device_alloc<bf16>(nq);
    dk = device_alloc<bf16>(nkv);
    dv = device_alloc<bf16>(nkv);
    lse = device_alloc<float>(nlse);
    d_depth_k = depth ? device_alloc<float>(ndepth) : nullptr;
    d_depth_v = depth ? device_alloc<float>(ndepth) : nullptr;
    if (depth) {
      check(cudaMemset(d_depth_k, 0, ndepth * sizeof(float)), "memset");
      check(cudaMemset(d_depth_v, 0, ndepth * sizeof(float)), "memset");
    }
  }
  ~Buffers() {
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)dk_in, (void*)dv_in, (void*)grad_o, (void*)o, (void*)dq,
                    (void*)dk, (void*)dv, (void*)lse, (void*)d_depth_k, (void*)d_depth_v})
      if (p) cudaFree(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  // A cheap check that the timed kernels produced numbers.
  bool finite_dq() const {
    std::vector<bf16> sample(std::min<size_t>(nq, 1 << 16));
    check(cudaMemcpy(sample.data(), dq + (nq - sample.size()), sample.size() * sizeof(bf16), cudaMemcpyDeviceToHost),
          "download");
    for (bf16 x : sample)
      if (!std::isfinite(fathom::bf16_to_float(x))) return false;
    return true;
  }
};

fathom::cuda::ModaShape moda_shape(const Shape& s) {
  fathom::cuda::ModaShape m;
  m.seq = fathom::cuda::FlashShape{s.B, s.T, s.Hq, s.Hk, s.d, 1.0 / std::sqrt(double(s.d))};
  m.slots = s.L;
  m.slot_begin = 0;
  m.slot_end = s.L;
  return m;
}

Timing time_moda(ModaKernel kernel, const Shape& s, int min_reps, uint64_t seed) {
  Buffers b(s, seed, true);
  const fathom::cuda::ModaShape shape = moda_shape(s);
  Timing t;
  void* fws = nullptr;
  void* bws = nullptr;
  try {
    const size_t fbytes = fathom::cuda::moda_forward_workspace_bytes(kernel, shape);
    const size_t bbytes = fathom::cuda::moda_backward_workspace_bytes(kernel, shape);
    fws = fbytes ? device_alloc<char>(fbytes) : nullptr;
    bws = bbytes ? device_alloc<char>(bbytes) : nullptr;
    fathom::cuda::ModaParams fp;
    fp.shape = shape;
    fp.q = b.q;
    fp.k = b.k;
    fp.v = b.v;
    fp.depth_k = b.dk_in;
    fp.depth_v = b.dv_in;
    fp.o = b.o;
    fp.lse = b.lse;
    fp.workspace = fws;
    fp.workspace_bytes = fbytes;
    fathom::cuda::ModaBackwardParams bp;
    bp.shape = shape;
    bp.q = b.q;
    bp.k = b.k;
    bp.v = b.v;
    bp.depth_k = b.dk_in;
    bp.depth_v = b.dv_in;
    bp.o = b.o;
    bp.grad_o = b.grad_o;
    bp.lse = b.lse;
    bp.dq = b.dq;
    bp.dk = b.dk;
    bp.dv = b.dv;
    // Added, the depth gradients accumulate across the timed runs: harmless for timing (no overflow
    // at these magnitudes within 50 runs). In bf16 they take the first half of the fp32 buffers.
    if (s.grads == DepthGrads::store_bf16) {
      bp.d_depth_k_bf16 = reinterpret_cast<bf16*>(b.d_depth_k);
      bp.d_depth_v_bf16 = reinterpret_cast<bf16*>(b.d_depth_v);
    } else {
      bp.d_depth_k = b.d_depth_k;
      bp.d_depth_v = b.d_depth_v;
    }
    bp.store_depth_grads = s.grads != DepthGrads::add_f32;
    bp.workspace = bws;
    bp.workspace_bytes = bbytes;
    t = time_passes(
        min_reps, [&] { fathom::cuda::moda_attention_forward(kernel, fp, nullptr); },
        [&] { fathom::cuda::moda_attention_backward(kernel, bp, nullptr); });
    if (!b.finite_dq()) t.error = "non-finite dq";
  } catch (const fathom::Error& e) {
    t.error = e.message();
  }
  if (fws) cudaFree(fws);
  if (bws) cudaFree(bws);
  return t;
}

Timing time_flash(const Shape& s, int min_reps, uint64_t seed) {
  Buffers b(s, seed, false);
  const fathom::cuda::FlashShape shape{s.B, s.T, s.Hq, s.Hk, s.d, 1.0 / std::sqrt(double(s.d))};
  const size_t ws_bytes = fathom::cuda::flash_backward_workspace_bytes(shape);
  void* ws = device_alloc<char>(ws_bytes);
  fathom::cuda::FlashParams fp;
  fp.shape = shape;
  fp.q = b.q;
  fp.k = b.k;
  fp.v = b.v;
  fp.o = b.o;
  fp.lse = b.lse;
  fathom::cuda::FlashBackwardParams bp;
  bp.shape = shape;
  bp.q = b.q;
  bp.k = b.k;
  bp.v = b.v;
  bp.o = b.o;
  bp.grad_o = b.grad_o;
  bp.lse = b.lse;
  bp.dq = b.dq;
  bp.dk = b.dk;
  bp.dv = b.dv;
  bp.workspace = ws;
  bp.workspace_bytes = ws_bytes;
  Timing t;
  try {
    t = time_passes(
        min_reps, [&] { fathom::cuda::flash_attention_forward(fp, nullptr); },
        [&] { fathom::cuda::flash_attention_backward(bp, nullptr); });
    if (!b.finite_dq()) t.error = "non-finite dq";
  } catch (const fathom::Error& e) {
    t.error = e.message();
  }
  cudaFree(ws);
  return t;
}

std::string first_line(const std::string& s) { return s.substr(0, std::min(s.find('\n'), size_t(100))); }

void table7(int min_reps) {
  const Shape s{1, 1024, 64, 8, 64, 64};
  struct Row {
    ModaKernel kernel;
    const char* name;
    double paper_ms;
  };
  // Paper Table 7 (A100, bf16, forward + backward): naive PyTorch, flash-compatible, + chunk, + group.
  const Row rows[] = {{ModaKernel::naive, "naive", 2128.900},
                      {ModaKernel::flat, "flat", 13.102},
                      {ModaKernel::chunk, "chunk", 6.286},
                      {ModaKernel::group, "group", 1.460}};
  std::printf("## Table 7: MoDA kernels, T = 1024, B = 1, G = 8, Hq = 64, Hk = 8, d = 64, L = 64\n\n");
  std::printf("| kernel | fwd ms | fwd+bwd ms | speed-up vs naive | paper A100 fwd+bwd ms | paper speed-up | reps |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  double naive_ms = 0, group_ms = 0;
  uint64_t seed = 70;
  for (const Row& r : rows) {
    const Timing t = time_moda(r.kernel, s, min_reps, seed += 10);
    if (!t.error.empty()) {
      std::printf("| %s | - | - | - | %.3f | %.1fx | 0 (failed: %s) |\n", r.name, r.paper_ms, 2128.9 / r.paper_ms,
                  first_line(t.error).c_str());
      continue;
    }
    if (r.kernel == ModaKernel::naive) naive_ms = t.total_ms;
    if (r.kernel == ModaKernel::group) group_ms = t.total_ms;
    char speedup[32] = "-";
    if (naive_ms > 0) std::snprintf(speedup, sizeof(speedup), "%.1fx", naive_ms / t.total_ms);
    std::printf("| %s | %.3f | %.3f | %s | %.3f | %.1fx | %d |\n", r.name, t.fwd_ms, t.total_ms, speedup, r.paper_ms,
                2128.9 / r.paper_ms, t.reps);
    std::fflush(stdout);
  }
  if (naive_ms > 0 && group_ms > 0)
    std::printf("\nTotal speed-up naive / group: %.1fx (paper, A100 against naive PyTorch: %.1fx)\n",
                naive_ms / group_ms, 2128.9 / 1.460);
  std::printf("\n");
}

void table2(int min_reps, int64_t min_t, int64_t max_t, const std::string& sweep) {
  struct Row {
    const char* sweep;
    Shape s;
    double paper_fa2_ms, paper_moda_ms;  // 0 where the paper's notes give no time
  };
  // Paper Table 2 (A100, bf16, forward + backward, Triton FA2 vs MoDA); the G sweep's times are not
  // in the notes (only its extra-time percentages, 27.07% at G = 2 to 2.84% at G = 32).
  const Row rows[] = {
      {"T", {1, 4096, 64, 8, 64, 64}, 7.970, 10.750},
      {"T", {1, 8192, 64, 8, 64, 64}, 28.700, 35.427},
      {"T", {1, 16384, 64, 8, 64, 64}, 116.700, 127.661},
      {"T", {1, 32768, 64, 8, 64, 64}, 459.854, 480.914},
      {"T", {1, 65536, 64, 8, 64, 64}, 1831.668, 1883.026},
      {"G", {1, 16384, 16, 8, 64, 64}, 0, 0},
      {"G", {1, 16384, 32, 8, 64, 64}, 0, 0},
      {"G", {1, 16384, 64, 8, 64, 64}, 116.700, 127.661},
      {"G", {1, 16384, 128, 8, 64, 64}, 0, 0},
      {"G", {1, 16384, 256, 8, 64, 64}, 0, 0},
      {"L", {1, 16384, 64, 8, 64, 64}, 116.700, 127.661},
      {"L", {1, 16384, 64, 8, 64, 128}, 116.700, 138.224},
      {"L", {1, 16384, 64, 8, 64, 256}, 116.700, 167.958},
      {"L", {1, 16384, 64, 8, 64, 0}, 0, 0},
      {"L", {1, 65536, 64, 8, 64, 0}, 0, 0},
      {"f32", {1, 16384, 64, 8, 64, 64, DepthGrads::store_f32}, 116.700, 127.661},
      {"f32", {1, 65536, 64, 8, 64, 64, DepthGrads::store_f32}, 1831.668, 1883.026},
      {"add", {1, 16384, 64, 8, 64, 64, DepthGrads::add_f32}, 116.700, 127.661},
      {"add", {1, 65536, 64, 8, 64, 64, DepthGrads::add_f32}, 1831.668, 1883.026},
  };
  std::printf("## Table 2: group kernel vs flash attention without depth (B = 1, d = 64)\n\n");
  std::printf(
      "Extra time = (MoDA - flash) / MoDA, the paper's definition; also / flash. TFLOP/s of the group\n"
      "kernel count the causal sequence part plus the depth part (backward 2.5x forward).\n\n");
  std::printf(
      "| sweep | T | G | Hq | Hk | L | flash fwd ms | flash fwd+bwd ms | group fwd ms | group fwd+bwd ms | "
      "extra / MoDA | extra / flash | group fwd TFLOP/s | group fwd+bwd TFLOP/s | paper A100 FA2 / MoDA ms | "
      "paper extra / MoDA | reps |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  uint64_t seed = 200;
  for (const Row& r : rows) {
    const Shape& s = r.s;
    if (s.T < min_t || s.T > max_t || (!sweep.empty() && sweep != r.sweep)) continue;
    const Timing fa = time_flash(s, min_reps, seed += 10);
    const Timing md = time_moda(ModaKernel::group, s, min_reps, seed += 10);
    const double fwd_flops = sequence_flops(s) + depth_flops(s), total_flops = 3.5 * fwd_flops;
    char paper[64] = "-", paper_extra[32] = "-";
    if (r.paper_moda_ms > 0) {
      std::snprintf(paper, sizeof(paper), "%.3f / %.3f", r.paper_fa2_ms, r.paper_moda_ms);
      std::snprintf(paper_extra, sizeof(paper_extra), "%.2f%%",
                    100.0 * (r.paper_moda_ms - r.paper_fa2_ms) / r.paper_moda_ms);
    }
    std::printf("| %s | %lld | %lld | %lld | %lld | %lld | ", r.sweep, (long long)s.T, (long long)(s.Hq / s.Hk),
                (long long)s.Hq, (long long)s.Hk, (long long)s.L);
    if (fa.error.empty())
      std::printf("%.3f | %.3f | ", fa.fwd_ms, fa.total_ms);
    else
      std::printf("failed: %s | - | ", first_line(fa.error).c_str());
    if (md.error.empty())
      std::printf("%.3f | %.3f | ", md.fwd_ms, md.total_ms);
    else
      std::printf("failed: %s | - | ", first_line(md.error).c_str());
    if (fa.error.empty() && md.error.empty())
      std::printf("%.2f%% | %.2f%% | ", 100.0 * (md.total_ms - fa.total_ms) / md.total_ms,
                  100.0 * (md.total_ms - fa.total_ms) / fa.total_ms);
    else
      std::printf("- | - | ");
    if (md.error.empty())
      std::printf("%.1f | %.1f | ", fwd_flops / md.fwd_ms * 1e-9, total_flops / md.total_ms * 1e-9);
    else
      std::printf("- | - | ");
    std::printf("%s | %s | %d / %d |\n", paper, paper_extra, fa.reps, md.reps);
    std::fflush(stdout);
  }
  std::printf("\n");
}

#endif

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "all";
  int min_reps = 5;
  int64_t min_t = 0, max_t = INT64_MAX;
  std::string sweep;  // empty: every row of Table 2
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "table7" || a == "table2" || a == "all") {
      mode = a;
    } else if (a == "--min-reps" && i + 1 < argc) {
      min_reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--sweep" && i + 1 < argc) {
      sweep = argv[++i];
    } else if (a == "--min-t" && i + 1 < argc) {
      min_t = std::atoll(argv[++i]);
    } else if (a == "--max-t" && i + 1 < argc) {
      max_t = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: bench_moda_attention [table7|table2|all] [--min-reps N] [--min-t T] [--max-t T] [--sweep "
                   "T|G|L|f32|add]\n");
      return 2;
    }
  }
#if !FATHOM_WITH_CUDA
  (void)min_reps;
  (void)min_t;
  (void)sweep;
  (void)max_t;
  std::printf("bench_moda_attention: fathom was built without CUDA; nothing to measure\n");
  return 0;
#else
  if (!fathom::bench::describe_device("bench_moda_attention", "; medians of CUDA-event timings after 2 warm-up runs"))
    return 0;
  if (mode == "table7" || mode == "all") table7(min_reps);
  if (mode == "table2" || mode == "all") table2(min_reps, min_t, max_t, sweep);
  return 0;
#endif
}
