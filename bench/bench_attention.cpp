// Flash-attention benchmark on the GPU: forward, backward and forward + backward times of fathom's
// CUDA kernels (median of CUDA-event timings after warm-up, fresh random bf16 inputs) and causal
// TFLOP/s, at the sizes compared with PyTorch SDPA in bench/attention_reference.py.
// FLOPs counted: forward 2 * 2 * B * Hq * T^2 * d / 2 (causal half of QK^T and PV), backward 2.5x that.
// Usage: bench_attention [--json PATH] [--max-t T] [--min-reps N]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"

#if FATHOM_WITH_CUDA
#include "bench/cuda_bench_util.h"
#include "kernels/attention/flash_attention.h"
#endif

namespace {

#if FATHOM_WITH_CUDA

using fathom::bench::check;
using fathom::bench::device_alloc;
using fathom::bench::median;
using fathom::bench::random_bf16;
using fathom::bench::upload;

struct Size {
  const char* name;
  int64_t B, T, Hq, Hk, d;
};

// The sizes of the comparison: long-context GQA at d = 64, and a classic d = 128 training shape.
const Size kSizes[] = {
    {"gqa8-d64-T4K", 1, 4096, 64, 8, 64},
    {"gqa8-d64-T16K", 1, 16384, 64, 8, 64},
    {"gqa8-d64-T64K", 1, 65536, 64, 8, 64},
    {"mha-d128-B8-T2K", 8, 2048, 32, 32, 128},
};

double forward_flops(const Size& s) {
  return 2.0 * 2.0 * double(s.B * s.Hq) * double(s.T) * double(s.T) * double(s.d) / 2.0;
}

struct Timing {
  double fwd_ms, bwd_ms, total_ms;
  int reps;
};

Timing run(const Size& s, int min_reps) {
  const size_t nq = size_t(s.B * s.T * s.Hq * s.d), nkv = size_t(s.B * s.T * s.Hk * s.d);
  const size_t nlse = size_t(s.B * s.Hq * s.T);
  const fathom::cuda::FlashShape shape{s.B, s.T, s.Hq, s.Hk, s.d, 1.0 / std::sqrt(double(s.d))};
  fathom::bf16* q = upload(random_bf16(nq, 1, 2.f));
  fathom::bf16* k = upload(random_bf16(nkv, 2, 2.f));
  fathom::bf16* v = upload(random_bf16(nkv, 3, 1.f));
  fathom::bf16* dout = upload(random_bf16(nq, 4, 1.f));
  fathom::bf16* o = device_alloc<fathom::bf16>(nq);
  fathom::bf16* dq = device_alloc<fathom::bf16>(nq);
  fathom::bf16* dk = device_alloc<fathom::bf16>(nkv);
  fathom::bf16* dv = device_alloc<fathom::bf16>(nkv);
  float* lse = device_alloc<float>(nlse);
  const size_t ws_bytes = fathom::cuda::flash_backward_workspace_bytes(shape);
  void* ws = device_alloc<char>(ws_bytes);

  fathom::cuda::FlashParams fp;
  fp.shape = shape;
  fp.q = q;
  fp.k = k;
  fp.v = v;
  fp.o = o;
  fp.lse = lse;
  fathom::cuda::FlashBackwardParams bp;
  bp.shape = shape;
  bp.q = q;
  bp.k = k;
  bp.v = v;
  bp.o = o;
  bp.grad_o = dout;
  bp.lse = lse;
  bp.dq = dq;
  bp.dk = dk;
  bp.dv = dv;
  bp.workspace = ws;
  bp.workspace_bytes = ws_bytes;

  cudaEvent_t e0, e1, e2;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  check(cudaEventCreate(&e2), "event");
  std::vector<double> fwd, bwd, total;
  double spent_ms = 0;
  for (int rep = -2; rep < min_reps || (spent_ms < 2000 && rep < 50); ++rep) {
    check(cudaEventRecord(e0), "record");
    fathom::cuda::flash_attention_forward(fp, nullptr);
    check(cudaEventRecord(e1), "record");
    fathom::cuda::flash_attention_backward(bp, nullptr);
    check(cudaEventRecord(e2), "record");
    check(cudaEventSynchronize(e2), "synchronize");
    float f = 0, b = 0;
    check(cudaEventElapsedTime(&f, e0, e1), "elapsed");
    check(cudaEventElapsedTime(&b, e1, e2), "elapsed");
    if (rep < 0) continue;  // warm-up
    fwd.push_back(f);
    bwd.push_back(b);
    total.push_back(f + b);
    spent_ms += f + b;
  }
  check(cudaGetLastError(), "the kernels");

  // A cheap sanity check that the timed kernels produced numbers.
  std::vector<fathom::bf16> sample(std::min<size_t>(nq, 1 << 16));
  check(cudaMemcpy(sample.data(), dq + (nq - sample.size()), sample.size() * 2, cudaMemcpyDeviceToHost), "download");
  for (fathom::bf16 x : sample)
    if (!std::isfinite(fathom::bf16_to_float(x))) {
      std::fprintf(stderr, "bench_attention: non-finite dq at %s\n", s.name);
      std::exit(1);
    }

  for (void* p : {(void*)q, (void*)k, (void*)v, (void*)dout, (void*)o, (void*)dq, (void*)dk, (void*)dv, (void*)lse, ws})
    cudaFree(p);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  return {median(fwd), median(bwd), median(total), int(total.size())};
}

#endif

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int64_t max_t = INT64_MAX;
  int min_reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--max-t" && i + 1 < argc) {
      max_t = std::atoll(argv[++i]);
    } else if (a == "--min-reps" && i + 1 < argc) {
      min_reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_attention [--json PATH] [--max-t T] [--min-reps N]\n");
      return 2;
    }
  }
#if !FATHOM_WITH_CUDA
  (void)min_reps;
  (void)max_t;
  std::printf("bench_attention: fathom was built without CUDA; nothing to measure\n");
  return 0;
#else
  if (!fathom::bench::describe_device("bench_attention", "")) return 0;
  std::printf(
      "| size | B | T | Hq | Hk | d | fwd ms | bwd ms | fwd+bwd ms | fwd TFLOP/s | bwd TFLOP/s | fwd+bwd TFLOP/s | "
      "reps |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::string json = "[\n";
  bool first = true;
  for (const Size& s : kSizes) {
    if (s.T > max_t) continue;
    const Timing t = run(s, min_reps);
    const double f = forward_flops(s), b = 2.5 * f;
    const double ftf = f / t.fwd_ms * 1e-9, btf = b / t.bwd_ms * 1e-9, ttf = (f + b) / t.total_ms * 1e-9;
    std::printf("| %s | %lld | %lld | %lld | %lld | %lld | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %d |\n", s.name,
                (long long)s.B, (long long)s.T, (long long)s.Hq, (long long)s.Hk, (long long)s.d, t.fwd_ms, t.bwd_ms,
                t.total_ms, ftf, btf, ttf, t.reps);
    std::fflush(stdout);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "%s  {\"size\": \"%s\", \"B\": %lld, \"T\": %lld, \"Hq\": %lld, \"Hk\": %lld, \"d\": %lld, "
                  "\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"total_ms\": %.4f}",
                  first ? "" : ",\n", s.name, (long long)s.B, (long long)s.T, (long long)s.Hq, (long long)s.Hk,
                  (long long)s.d, t.fwd_ms, t.bwd_ms, t.total_ms);
    json += line;
    first = false;
  }
  json += "\n]\n";
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "bench_attention: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
#endif
}
