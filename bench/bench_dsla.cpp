// DSLA mixer benchmark on the GPU: the chunked training kernels' forward + backward for one and two
// states, and the decode step, on fathom's CUDA kernels (median of CUDA-event timings on fathom's
// stream after warm-up; bf16 q, k, v, grad_o; F32 gates logsigmoid(x) / 16 as the layer makes them).
// FLOPs counted per state, token and head (d the head dim, C = 64 the usual chunk): forward
// 4 d^2 (q S and the k^T v state update) + 2 C d (causal half of the chunk's scores and A v);
// backward 2.5x the forward. Bytes: what the kernels must read and write at least (inputs once).
// Usage: bench_dsla [--json PATH] [--min-reps N] [--once]
// --once: one forward + backward of each training size with two states and no timing, for a profiler
// (ncu) to time each kernel.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

#if FATHOM_WITH_CUDA
#include "bench/cuda_bench_util.h"
#include "kernels/dsla/dsla.h"
#include "kernels/runtime/backend.h"
#include "kernels/runtime/runtime.h"
#endif

namespace {

#if FATHOM_WITH_CUDA

using fathom::DType;
using fathom::Tensor;
using fathom::bench::check;
using fathom::bench::median;

const fathom::Device kGpu = fathom::Device::cuda(0);

struct Size {
  const char* name;
  int64_t B, T, H, d;
};
const Size kTrainSizes[] = {{"B8-T2048", 8, 2048, 32, 128}, {"B1-T16384", 1, 16384, 32, 128}};

Tensor bf16_tensor(const fathom::Shape& shape, uint64_t seed, float amplitude) {
  return Tensor::from_vector(fathom::bench::random_bf16(size_t(shape.numel()), seed, amplitude), shape).to(kGpu);
}
// Log gates logsigmoid(x) / 16 for x uniform in [-4, 4).
Tensor gate_tensor(const fathom::Shape& shape, uint64_t seed) {
  std::vector<fathom::bf16> u = fathom::bench::random_bf16(size_t(shape.numel()), seed, 4.f);
  std::vector<float> g(u.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < int64_t(g.size()); ++i) g[i] = -std::log1p(std::exp(-fathom::bf16_to_float(u[i]))) / 16.f;
  return Tensor::from_vector(g, shape).to(kGpu);
}

// Median milliseconds of f() over at least min_reps runs (and up to 1 s of them) after two warm-ups.
template <typename F>
double time_ms(int min_reps, F&& f) {
  cudaStream_t stream = fathom::cuda::stream_for(kGpu);
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  std::vector<double> ms;
  double spent = 0;
  for (int rep = -2; rep < min_reps || (spent < 1000 && rep < 50); ++rep) {
    check(cudaEventRecord(e0, stream), "record");
    f();
    check(cudaEventRecord(e1, stream), "record");
    check(cudaEventSynchronize(e1), "synchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    if (rep < 0) continue;
    ms.push_back(t);
    spent += t;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(ms);
}

double forward_flops(const Size& s) { return double(s.B * s.T * s.H) * (4.0 * s.d * s.d + 2.0 * 64 * s.d); }

#endif

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int min_reps = 5;
  bool once = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--once") {
      once = true;
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--min-reps" && i + 1 < argc) {
      min_reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_dsla [--json PATH] [--min-reps N] [--once]\n");
      return 2;
    }
  }
#if !FATHOM_WITH_CUDA
  (void)min_reps;
  (void)once;
  std::printf("bench_dsla: fathom was built without CUDA; nothing to measure\n");
  return 0;
#else
  if (!fathom::bench::describe_device("bench_dsla", "") || !fathom::cuda::init()) return 0;
  std::string json = "[\n";
  auto add_json = [&](const std::string& line) { json += (json.size() > 2 ? ",\n  " : "  ") + line; };
  std::printf("| size | states | fwd ms | bwd ms | fwd+bwd ms | GFLOP | TFLOP/s | min bytes GB | reps |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Size& s : kTrainSizes) {
    const fathom::Shape shape{s.B, s.T, s.H, s.d};
    const Tensor q = bf16_tensor(shape, 1, 1.f), k = bf16_tensor(shape, 2, 1.f), v = bf16_tensor(shape, 3, 1.f);
    const Tensor dout = bf16_tensor(shape, 4, 1.f), g1 = gate_tensor(shape, 5), g2 = gate_tensor(shape, 6);
    const Tensor gamma = Tensor::full({s.H}, 0.5, DType::f32, kGpu);
    if (once) {
      const fathom::DslaForward f = fathom::dsla_forward(q, k, v, g1, g2, gamma, {}, false, true);
      (void)fathom::dsla_backward(dout, q, k, v, g1, g2, gamma, f.scores);
      check(cudaDeviceSynchronize(), "synchronize");
      std::printf("| %s | 2 | (once, untimed) |\n", s.name);
      continue;
    }
    for (int states : {1, 2}) {
      const Tensor g2s = states == 2 ? g2 : Tensor();
      // As in training (autograd/dsla.cpp): the forward keeps its scores for the backward.
      const Tensor scores = fathom::dsla_forward(q, k, v, g1, g2s, gamma, {}, false, true).scores;
      const double fwd =
          time_ms(min_reps, [&] { (void)fathom::dsla_forward(q, k, v, g1, g2s, gamma, {}, false, true); });
      const double bwd = time_ms(min_reps, [&] { (void)fathom::dsla_backward(dout, q, k, v, g1, g2s, gamma, scores); });
      const double total = time_ms(min_reps, [&] {
        const fathom::DslaForward f = fathom::dsla_forward(q, k, v, g1, g2s, gamma, {}, false, true);
        (void)fathom::dsla_backward(dout, q, k, v, g1, g2s, gamma, f.scores);
      });
      const double flops = states * 3.5 * forward_flops(s);
      // Forward reads q, k, v (bf16) and the gates (f32), writes o; backward reads those and grad_o,
      // writes dq, dk, dv (bf16) and the gates' gradients (f32).
      const double elems = double(shape.numel());
      const double bytes = elems * (3 * 2 + states * 4 + 2) + elems * (4 * 2 + states * 4 + 3 * 2 + states * 4);
      std::printf("| %s | %d | %.3f | %.3f | %.3f | %.1f | %.1f | %.2f | %d |\n", s.name, states, fwd, bwd, total,
                  flops * 1e-9, flops / total * 1e-9, bytes * 1e-9, min_reps);
      std::fflush(stdout);
      char line[256];
      std::snprintf(line, sizeof(line),
                    "{\"kind\": \"train\", \"size\": \"%s\", \"states\": %d, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
                    "\"total_ms\": %.4f}",
                    s.name, states, fwd, bwd, total);
      add_json(line);
    }
  }
  if (once) return 0;
  std::printf("\n| decode batch | states | step ms (one token per sequence) | state bytes per layer MB |\n");
  std::printf("|---:|---:|---:|---:|\n");
  for (int64_t B : {1, 64}) {
    const int64_t H = 32, d = 128;
    const fathom::Shape shape{B, 1, H, d};
    const Tensor q = bf16_tensor(shape, 11, 1.f), k = bf16_tensor(shape, 12, 1.f), v = bf16_tensor(shape, 13, 1.f);
    const Tensor g1 = gate_tensor(shape, 14), g2 = gate_tensor(shape, 15);
    const Tensor gamma = Tensor::full({H}, 0.5, DType::f32, kGpu);
    fathom::DslaState state{Tensor::zeros({B, H, d, d}, DType::f32, kGpu),
                            Tensor::zeros({B, H, d, d}, DType::f32, kGpu)};
    const double step =
        time_ms(std::max(min_reps, 20), [&] { (void)fathom::dsla_step(q, k, v, g1, g2, gamma, state); });
    const double mb = 2.0 * double(B * H * d * d) * 4 / 1e6;
    std::printf("| %lld | 2 | %.4f | %.1f |\n", (long long)B, step, mb);
    char line[160];
    std::snprintf(line, sizeof(line), "{\"kind\": \"decode\", \"batch\": %lld, \"states\": 2, \"step_ms\": %.5f}",
                  (long long)B, step);
    add_json(line);
  }
  json += "\n]\n";
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "bench_dsla: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
#endif
}
