// CUDA kernel benchmark: median time of each non-attention kernel at training-sized shapes, as
// achieved bandwidth (bytes that must move: each input read once, each output written once) against
// the device-to-device copy measured in the same run, and the cuBLASLt bf16 8192^3 GEMM as the
// matrix ceiling. CUDA events around each launch, warm-up first, median of many runs; inputs are
// random and several times larger than L2.
// The decode table times the skinny GEMM (kernels/matmul/skinny_matmul.h) against cuBLASLt at the 1B
// model's decoding shapes, as GB/s of weight bytes read against the same copy, and a layer's grouped
// projections (skinny_matmul_grouped) against one call per weight, and a decoding step's layer chain
// replayed from a CUDA graph with ordinary and with dependent launches (FATHOM_DEPENDENT_LAUNCH), SwiGLU's
// projection separate (grouped gate/up, then SwiGLU) against fused in gate/up's epilogue (skinny_swiglu), and a
// block's residual step then gate/up against both in one launch (skinny_matmul_after_residual_step).
// The FP8 tables time the FP8 linears' GEMMs and casts at the 1B model's training shapes (fp8_tables).
// Usage: bench_cuda_kernels [reps] [decode|fp8]   (default 30 reps; `decode` or `fp8`: the ceilings and those
// tables only)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/random.h"
#include "kernels/adamw/adamw.h"
#include "kernels/argmax/argmax.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/fp8/fp8.h"
#include "kernels/matmul/fp8_matmul.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/runtime/dependent_launch.h"
#include "kernels/sampling/sampling.h"
#include "kernels/swiglu/swiglu.h"

#ifdef FATHOM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/runtime/backend.h"

using namespace fathom;

namespace {

const Device kGpu = Device::cuda(0);
int reps = 30;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median milliseconds of f on the current stream, after warm-up runs.
double median_ms(const std::function<void()>& f, int warmup = 3) {
  cudaStream_t s = cuda::current_stream(0);
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(start, s), "record");
    f();
    check(cudaEventRecord(stop, s), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

uint64_t next_seed = 1;

// Random values in [low, high) of `dtype` on the GPU: 4M random values from the host, repeated
// across the tensor and cast on the device (so even multi-GB inputs are quick to make).
Tensor random_gpu(const Shape& shape, DType dtype, double low = -1.0, double high = 1.0) {
  const int64_t n = shape.numel(), block = std::min<int64_t>(n, int64_t(1) << 22);
  Tensor host = Tensor::empty({block}, DType::f32);
  Generator gen{next_seed++, 0};
  fill_uniform(host, gen, low, high);
  Tensor block_gpu = host.to(kGpu);
  Tensor f32 = Tensor::empty({n}, DType::f32, kGpu);
  for (int64_t at = 0; at < n; at += block) {
    const int64_t len = std::min(block, n - at);
    f32.narrow(at, len).copy_from(block_gpu.narrow(0, len));
  }
  return f32.to(dtype).view(shape);
}

Tensor random_ids_gpu(int64_t n, int64_t bound) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint64_t x = next_seed++ * 0x9E3779B97F4A7C15ull;
  for (auto& id : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    id = int32_t(x % uint64_t(bound));
  }
  return Tensor::from_vector(v, {n}).to(kGpu);
}

double copy_gbps = 0;  // measured ceiling

void row(const std::string& op, const std::string& shape, double ms, double bytes) {
  const double gbps = bytes / ms / 1e6;
  std::printf("| %s | %s | %.3f | %.0f | %.0f%% |\n", op.c_str(), shape.c_str(), ms, gbps, 100.0 * gbps / copy_gbps);
}

// x [M, K] W [N, K]^T at the 1B model's decoding shapes: cuBLASLt (matmul with the skinny kernel turned
// off) against skinny_matmul, bf16 in and out. Each call reads a different copy of W, enough copies to
// exceed L2 four times, so every timed read of W comes from HBM as in a decoding step (x stays in L2,
// as it does there). Bytes: the weight's, read once. The last rows add up one token step's GEMMs
// (16 layers of q/k/v, o, gate/up and down, then the head).
void decode_gemm_table(const cudaDeviceProp& prop) {
  struct Shape1B {
    const char* name;
    int64_t n, k;
    int per_step;  // how many a 1B decoding step runs
  };
  const Shape1B shapes[] = {{"q/k/v fused", 6144, 2048, 16},
                            {"o_proj", 2048, 2048, 16},
                            {"gate/up fused", 16384, 2048, 16},
                            {"down_proj", 2048, 8192, 16},
                            {"lm_head", 100352, 2048, 1}};
  std::printf(
      "\n| decode GEMM | M | N x K | weight MB | cuBLASLt ms | GB/s | of copy | skinny ms | GB/s | of copy | "
      "speed-up |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const int64_t m : {int64_t(1), int64_t(8), int64_t(32)}) {
    double step_cublas = 0, step_skinny = 0, step_bytes = 0;
    for (const Shape1B& s : shapes) {
      const double bytes = 2.0 * double(s.n) * double(s.k);
      const int copies = int(std::max(1.0, std::ceil(4.0 * prop.l2CacheSize / bytes)));
      std::vector<Tensor> weights;
      for (int i = 0; i < copies; ++i) weights.push_back(random_gpu({s.n, s.k}, DType::bf16, -0.05, 0.05));
      const Tensor x = random_gpu({m, s.k}, DType::bf16);
      Tensor y = Tensor::empty({m, s.n}, DType::bf16, kGpu);
      size_t next = 0;
      set_skinny_matmul_policy(SkinnyMatmulPolicy::never);
      const double cublas_ms = median_ms([&] { matmul(x, false, weights[next++ % weights.size()], true, y); });
      set_skinny_matmul_policy(SkinnyMatmulPolicy::automatic);
      const double skinny_ms = median_ms([&] { skinny_matmul(x, weights[next++ % weights.size()], y); });
      const double cublas_gbps = bytes / cublas_ms / 1e6, skinny_gbps = bytes / skinny_ms / 1e6;
      std::printf("| %s | %ld | %ld x %ld | %.1f | %.4f | %.0f | %.0f%% | %.4f | %.0f | %.0f%% | %.2fx |\n", s.name,
                  long(m), long(s.n), long(s.k), bytes / 1e6, cublas_ms, cublas_gbps, 100.0 * cublas_gbps / copy_gbps,
                  skinny_ms, skinny_gbps, 100.0 * skinny_gbps / copy_gbps, cublas_ms / skinny_ms);
      step_cublas += s.per_step * cublas_ms;
      step_skinny += s.per_step * skinny_ms;
      step_bytes += s.per_step * bytes;
    }
    const double at_copy_ms = step_bytes / copy_gbps / 1e6;
    std::printf("| one token step's GEMMs | %ld | %.0f MB | | %.3f | %.0f | %.0f%% | %.3f | %.0f | %.0f%% | %.2fx |\n",
                long(m), step_bytes / 1e6, step_cublas, step_bytes / step_cublas / 1e6,
                100.0 * at_copy_ms / step_cublas, step_skinny, step_bytes / step_skinny / 1e6,
                100.0 * at_copy_ms / step_skinny, step_cublas / step_skinny);
  }
}

// A layer's projections of one input at decoding's rows: one skinny call per weight, against one grouped
// launch of them all (skinny_matmul_grouped: what project_each runs), against one GEMM over the weights
// stacked (the bound a fused weight would give). Fresh weight copies per call, as above. Bytes: the weights'.
void grouped_projection_table(const cudaDeviceProp& prop) {
  struct Projections {
    const char* name;
    std::vector<int64_t> n;
    int64_t k;
  };
  const Projections groups[] = {{"OLMo2 1B q/k/v", {2048, 2048, 2048}, 2048},
                                {"Llama 3.2 1B q/k/v", {2048, 512, 512}, 2048},
                                {"OLMo2 1B up/gate", {8192, 8192}, 2048}};
  std::printf(
      "\n| projections | M | weight MB | one call each ms | grouped ms | of copy | stacked ms | grouped "
      "speed-up |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const int64_t m : {int64_t(1), int64_t(8), int64_t(32)})
    for (const Projections& g : groups) {
      int64_t total_n = 0;
      for (const int64_t n : g.n) total_n += n;
      const double bytes = 2.0 * double(total_n) * double(g.k);
      const int copies = int(std::max(1.0, std::ceil(4.0 * prop.l2CacheSize / bytes)));
      std::vector<std::vector<Tensor>> weights(static_cast<size_t>(copies));
      std::vector<Tensor> stacked;
      std::vector<Tensor> outputs;
      for (const int64_t n : g.n) outputs.push_back(Tensor::empty({m, n}, DType::bf16, kGpu));
      for (auto& set : weights) {
        stacked.push_back(random_gpu({total_n, g.k}, DType::bf16, -0.05, 0.05));
        int64_t at = 0;
        for (const int64_t n : g.n) {
          set.push_back(stacked.back().narrow(at, n));
          at += n;
        }
      }
      const Tensor x = random_gpu({m, g.k}, DType::bf16);
      Tensor y_stacked = Tensor::empty({m, total_n}, DType::bf16, kGpu);
      size_t next = 0;
      const double each_ms = median_ms([&] {
        const std::vector<Tensor>& set = weights[next++ % weights.size()];
        for (size_t i = 0; i < set.size(); ++i) skinny_matmul(x, set[i], outputs[i]);
      });
      const double grouped_ms = median_ms([&] { skinny_matmul_grouped(x, weights[next++ % weights.size()], outputs); });
      const double stacked_ms = median_ms([&] { skinny_matmul(x, stacked[next++ % stacked.size()], y_stacked); });
      std::printf("| %s | %ld | %.1f | %.4f | %.4f | %.0f%% | %.4f | %.2fx |\n", g.name, long(m), bytes / 1e6, each_ms,
                  grouped_ms, 100.0 * bytes / grouped_ms / 1e6 / copy_gbps, stacked_ms, each_ms / grouped_ms);
    }
}

// Median milliseconds of one replay of `work` captured as a CUDA graph on device 0 (exits if it cannot be).
double graph_ms(const std::function<void()>& work) {
  std::string reason;
  const cuda::Graph graph = cuda::Graph::capture(0, work, &reason);
  if (!graph.captured()) {
    std::fprintf(stderr, "capture failed: %s\n", reason.c_str());
    std::exit(1);
  }
  return median_ms([&] { graph.replay(); });
}

// A decoding step's layer chain at the Llama 3.2 1B's shapes, 16 layers replayed from one CUDA graph as a
// decoding step is: norm, grouped q/k/v, an elementwise stand-in for attention, o_proj, the residual add,
// norm, grouped gate/up, SwiGLU, down_proj, the residual add. Ordinary launches against dependent ones
// (FATHOM_DEPENDENT_LAUNCH: each GEMM starts while the kernel ahead finishes; at these K of 2048 and 8192 it asks L2
// for its first weights only under FATHOM_SKINNY_L2_PREFETCH=always). Bytes: the weights', each layer its own
// (1.9 GB, far past L2).
void dependent_launch_table() {
  const int64_t d = 2048, kv = 512, ffn = 8192;
  const int layers = 16;
  struct Layer {
    Tensor q, k, v, o, gate, up, down;
  };
  std::vector<Layer> w;
  for (int l = 0; l < layers; ++l)
    w.push_back({random_gpu({d, d}, DType::bf16, -0.02, 0.02), random_gpu({kv, d}, DType::bf16, -0.02, 0.02),
                 random_gpu({kv, d}, DType::bf16, -0.02, 0.02), random_gpu({d, d}, DType::bf16, -0.02, 0.02),
                 random_gpu({ffn, d}, DType::bf16, -0.02, 0.02), random_gpu({ffn, d}, DType::bf16, -0.02, 0.02),
                 random_gpu({d, ffn}, DType::bf16, -0.02, 0.02)});
  const double bytes = 2.0 * layers * double(2 * d * d + 2 * kv * d + 3 * ffn * d);
  const Tensor norm_weight = Tensor::full({d}, 1.0, DType::bf16, kGpu);
  std::printf(
      "\n| 16 Llama-1B layers, one graph | M | weight MB | ordinary ms | of copy | dependent ms | of copy | speed-up "
      "|\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  set_skinny_matmul_policy(SkinnyMatmulPolicy::always);
  for (const int64_t m : {int64_t(1), int64_t(8)}) {
    const Tensor x = random_gpu({m, d}, DType::bf16);
    Tensor h;
    const auto step = [&] {
      h = x;
      for (const Layer& l : w) {
        const Tensor xn = rms_norm_forward(h, norm_weight, 1e-5).y;
        std::vector<Tensor> qkv{Tensor::empty({m, d}, DType::bf16, kGpu), Tensor::empty({m, kv}, DType::bf16, kGpu),
                                Tensor::empty({m, kv}, DType::bf16, kGpu)};
        skinny_matmul_grouped(xn, std::vector<Tensor>{l.q, l.k, l.v}, qkv);
        const Tensor attended = add(qkv[0], xn);
        Tensor o = Tensor::empty({m, d}, DType::bf16, kGpu);
        skinny_matmul(attended, l.o, o);
        const Tensor mid = add(h, o);
        const Tensor xn2 = rms_norm_forward(mid, norm_weight, 1e-5).y;
        std::vector<Tensor> gu{Tensor::empty({m, ffn}, DType::bf16, kGpu), Tensor::empty({m, ffn}, DType::bf16, kGpu)};
        skinny_matmul_grouped(xn2, std::vector<Tensor>{l.gate, l.up}, gu);
        Tensor down = Tensor::empty({m, d}, DType::bf16, kGpu);
        skinny_matmul(swiglu_forward(gu[0], gu[1]), l.down, down);
        h = add(mid, down);
      }
    };
    double ms[2];
    for (const Toggle t : {Toggle::off, Toggle::on}) {
      set_dependent_launch(t);
      ms[int(t)] = graph_ms(step);
    }
    set_dependent_launch(Toggle::off);
    const auto of_copy = [&](double t) { return 100.0 * bytes / t / 1e6 / copy_gbps; };
    std::printf(
        "| q/k/v, o, gate/up, down + norms, adds, SwiGLU | %ld | %.0f | %.3f | %.0f%% | %.3f | %.0f%% | %.2fx |\n",
        long(m), bytes / 1e6, ms[0], of_copy(ms[0]), ms[1], of_copy(ms[1]), ms[0] / ms[1]);
  }
  set_skinny_matmul_policy(SkinnyMatmulPolicy::never);
}

// OLMo2 1B's and 190M's MLP shapes, and 16 layers of random gate/up weights at one (past L2), as the gate/up
// tables below replay them.
struct MlpShape {
  const char* name;
  int64_t ffn, d;
};
constexpr MlpShape kMlpShapes[] = {{"OLMo2 1B", 8192, 2048}, {"OLMo2 190M", 3072, 768}};
constexpr int kGateUpLayers = 16;

std::vector<std::pair<Tensor, Tensor>> gate_up_layers(const MlpShape& mlp) {
  std::vector<std::pair<Tensor, Tensor>> w;
  for (int l = 0; l < kGateUpLayers; ++l)
    w.emplace_back(random_gpu({mlp.ffn, mlp.d}, DType::bf16, -0.05, 0.05),
                   random_gpu({mlp.ffn, mlp.d}, DType::bf16, -0.05, 0.05));
  return w;
}

// One row of a gate/up table: the two sides, each replayed from one CUDA graph with dependent launches, as
// ms and % of copy bandwidth for the gate/up weights' bytes, and the second's speed-up; `label` is the row's
// leading cells.
void gate_up_row(const std::string& label, const MlpShape& mlp, const std::function<void()>& first,
                 const std::function<void()>& second) {
  const Toggle dependent_before = dependent_launch();
  set_dependent_launch(Toggle::on);
  const double ms[2] = {graph_ms(first), graph_ms(second)};
  set_dependent_launch(dependent_before);
  const double bytes = 2.0 * 2.0 * kGateUpLayers * double(mlp.ffn) * double(mlp.d);
  const auto of_copy = [&](double t) { return 100.0 * bytes / t / 1e6 / copy_gbps; };
  std::printf("| %s | %.0f | %.3f | %.0f%% | %.3f | %.0f%% | %.2fx |\n", label.c_str(), bytes / 1e6, ms[0],
              of_copy(ms[0]), ms[1], of_copy(ms[1]), ms[0] / ms[1]);
}

// SwiGLU's projection at decoding's rows, as 16 layers of a decoding step run it: grouped gate/up then the
// SwiGLU kernel (FATHOM_SWIGLU_PROJECTION=separate, the default) against skinny_swiglu (fused: one launch,
// neither product written), at OLMo2 1B's and 190M's MLP shapes. Each side is 16 calls on 16 weight pairs (past
// L2), replayed from one CUDA graph with dependent launches, as a step replays them. Bytes: the two weights'.
void swiglu_projection_table() {
  std::printf(
      "\n| SwiGLU projection, 16 layers, one graph | M | weight MB | separate ms | of copy | fused ms | of copy | "
      "fused speed-up |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const MlpShape& mlp : kMlpShapes) {
    const std::vector<std::pair<Tensor, Tensor>> w = gate_up_layers(mlp);
    for (const int64_t m : {int64_t(1), int64_t(8)}) {
      const Tensor x = random_gpu({m, mlp.d}, DType::bf16);
      std::vector<Tensor> gu{Tensor::empty({m, mlp.ffn}, DType::bf16, kGpu),
                             Tensor::empty({m, mlp.ffn}, DType::bf16, kGpu)};
      Tensor y = Tensor::empty({m, mlp.ffn}, DType::bf16, kGpu);
      const auto separate = [&] {
        for (const auto& [gate, up] : w) {
          skinny_matmul_grouped(x, std::vector<Tensor>{gate, up}, gu);
          const Tensor gated = swiglu_forward(gu[0], gu[1]);  // SwiGLU allocates its output, as a step's does
        }
      };
      const auto fused = [&] {
        for (const auto& [gate, up] : w) skinny_swiglu(x, gate, up, y);
      };
      gate_up_row(std::string(mlp.name) + " | " + std::to_string(m), mlp, separate, fused);
    }
  }
}

// A block's residual step and the MLP's gate/up products at one row, 16 layers in one graph with dependent
// launches: the step's own kernel (rms_norm_forward with the residual post-norm, add_rms_norm_forward pre-norm)
// then the grouped products, against skinny_matmul_after_residual_step's one launch. Bytes: gate and up's weights.
void residual_step_table() {
  std::printf(
      "\n| residual step + gate/up, 16 layers, one graph, M = 1 | step | weight MB | separate ms | of copy |"
      " one launch ms | of copy | speed-up |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const MlpShape& mlp : kMlpShapes) {
    const std::vector<std::pair<Tensor, Tensor>> w = gate_up_layers(mlp);
    const Tensor residual = random_gpu({1, mlp.d}, DType::bf16), x = random_gpu({1, mlp.d}, DType::bf16);
    const Tensor norm = random_gpu({mlp.d}, DType::bf16, 0.5, 1.5);
    std::vector<Tensor> gu{Tensor::empty({1, mlp.ffn}, DType::bf16, kGpu),
                           Tensor::empty({1, mlp.ffn}, DType::bf16, kGpu)};
    Tensor h = Tensor::empty({1, mlp.d}, DType::bf16, kGpu);
    for (const ResidualStep kind : {ResidualStep::post_norm, ResidualStep::pre_norm}) {
      const bool post = kind == ResidualStep::post_norm;
      const auto separate = [&] {
        for (const auto& [gate, up] : w) {
          const Tensor in = post ? rms_norm_forward(x, norm, 1e-6, residual).y
                                 : add_rms_norm_forward(residual, x, norm, 1e-6).normed.y;
          skinny_matmul_grouped(in, std::vector<Tensor>{gate, up}, gu);
        }
      };
      const auto one_launch = [&] {
        for (const auto& [gate, up] : w)
          skinny_matmul_after_residual_step({kind, residual, x, norm, 1e-6}, std::vector<Tensor>{gate, up}, gu, h);
      };
      gate_up_row(std::string(mlp.name) + (post ? " | post-norm" : " | pre-norm"), mlp, separate, one_launch);
    }
  }
}

}  // namespace

// One GEMM's row: M x K x N at `ms`, as TFLOP/s and as a share of the bf16 8192^3 ceiling.
void gemm_row(const char* name, int64_t m, int64_t k, int64_t n, double ms, double ceiling_tflops) {
  const double tf = 2.0 * double(m) * k * n / ms / 1e9;
  std::printf("| %s | %ld x %ld x %ld | %.3f | %.1f | %.0f%% |\n", name, long(m), long(k), long(n), ms, tf,
              100.0 * tf / ceiling_tflops);
}

// The median time of matmul (cuBLASLt) on random operands: a [m, k] (or [k, m] transposed), b [k, n] (or
// [n, k] transposed).
double matmul_ms(int64_t m, int64_t k, int64_t n, bool ta, bool tb, DType dt) {
  Tensor a = random_gpu(ta ? Shape{k, m} : Shape{m, k}, dt), b = random_gpu(tb ? Shape{n, k} : Shape{k, n}, dt);
  Tensor c = Tensor::empty({m, n}, dt, kGpu);
  return median_ms([&] { matmul(a, ta, b, tb, c); });
}

// The FP8 linears' kernels (train.precision fp8) at the 1B model's training shapes, 4 x 4096 tokens through
// an up-projection of d 2048 to FFN 8192: its three GEMMs in FP8 as the FP8 linear runs them (the forward
// e4m3 x e4m3 with fast accumulation; dX and dW with the e5m2 gradient, dW accumulated into f32), beside
// the same products in bf16 and against the bf16 8192^3 ceiling; then the amax, cast and cast-transpose of
// the 16384 x 8192 output gradient, as bytes against the copy (amax reads 2 B an element, the cast reads 2
// and writes 1, the cast-transpose writes both copies).
// On a GPU without FP8 tensor cores, only the bf16 rows.
void fp8_tables(const cudaDeviceProp& prop, double gemm_tflops) {
  const int64_t T = 16384, d = 2048, f = 8192;
  std::printf("| GEMM (1B up-projection) | M x K x N | ms | TFLOP/s | of bf16 8192^3 |\n|---|---|---:|---:|---:|\n");
  // The same three products in bf16 (cuBLASLt), for the ratio.
  gemm_row("bf16 x W^T (fwd)", T, d, f, matmul_ms(T, d, f, false, true, DType::bf16), gemm_tflops);
  gemm_row("bf16 dY W (dX)", T, f, d, matmul_ms(T, f, d, false, false, DType::bf16), gemm_tflops);
  gemm_row("bf16 dY^T X (dW)", f, T, d, matmul_ms(f, T, d, true, false, DType::bf16), gemm_tflops);
  if (prop.major * 10 + prop.minor < 89) {
    std::printf("\nFP8 rows skipped: compute capability %d.%d has no FP8 tensor cores\n\n", prop.major, prop.minor);
    return;
  }
  const Fp8Tensor x = fp8_quantize(random_gpu({T, d}, DType::bf16), DType::e4m3, true);   // [T, d], [d, T]
  const Fp8Tensor w = fp8_quantize(random_gpu({f, d}, DType::bf16), DType::e4m3, true);   // [f, d], [d, f]
  const Fp8Tensor dy = fp8_quantize(random_gpu({T, f}, DType::bf16), DType::e5m2, true);  // [T, f], [f, T]
  Tensor y = Tensor::empty({T, f}, DType::bf16, kGpu), dx = Tensor::empty({T, d}, DType::bf16, kGpu),
         dw = Tensor::zeros({f, d}, DType::f32, kGpu);
  auto fp8_gemm = [&](const char* name, const Tensor& a, const Tensor& a_scale, const Tensor& b, const Tensor& b_scale,
                      Tensor& c, Fp8GemmOptions options) {
    gemm_row(name, a.dim(0), a.dim(1), b.dim(0), median_ms([&] { fp8_matmul(a, a_scale, b, b_scale, c, options); }),
             gemm_tflops);
  };
  fp8_gemm("e4m3 x W^T (fwd, fast accumulation)", x.data, x.scale_inv, w.data, w.scale_inv, y,
           {.fast_accumulation = true});
  fp8_gemm("e5m2 dY W (dX)", dy.data, dy.scale_inv, w.transposed, w.scale_inv, dx, {});
  fp8_gemm("e5m2 dY^T X (dW, += into f32)", dy.transposed, dy.scale_inv, x.transposed, x.scale_inv, dw,
           {.accumulate = true});

  std::printf("\n| FP8 cast kernel | shape | ms | GB/s | of copy |\n|---|---|---:|---:|---:|\n");
  const Tensor g = random_gpu({T, f}, DType::bf16);
  const Tensor amax = fp8_amax(g);
  const double n = double(T) * double(f);
  row("amax (bf16)", "16384 x 8192", median_ms([&] { fp8_amax(g); }), n * 2);
  row("cast bf16 -> e5m2", "16384 x 8192", median_ms([&] { fp8_cast(g, amax, DType::e5m2); }), n * 3);
  row("cast-transpose bf16 -> e5m2, both copies", "16384 x 8192",
      median_ms([&] { fp8_cast_transpose(g, amax, DType::e5m2); }), n * 4);
  row("cast-transpose bf16 -> e5m2, transpose only", "16384 x 8192",
      median_ms([&] { fp8_cast_transpose(g, amax, DType::e5m2, false); }), n * 3);
  row("amax + cast-transpose (fp8_quantize)", "16384 x 8192", median_ms([&] { fp8_quantize(g, DType::e5m2, true); }),
      n * 6);
  std::printf("\n");
}

int main(int argc, char** argv) {
  if (argc > 1) reps = std::max(1, std::atoi(argv[1]));
  const std::string only = argc > 2 ? argv[2] : "";
  if (!only.empty() && only != "decode" && only != "fp8") {
    std::fprintf(stderr, "bench_cuda_kernels: the second argument must be decode or fp8, got '%s'\n", only.c_str());
    return 2;
  }
  if (!cuda::init()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s, %d SMs, %.0f MiB L2, reps %d (median)\n\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1048576.0, reps);

  // ---- ceilings ----
  {
    const int64_t n = int64_t(1) << 30;  // 1 GiB
    Tensor a = random_gpu({n / 4}, DType::f32), b = Tensor::empty({n / 4}, DType::f32, kGpu);
    const double ms = median_ms([&] { b.copy_from(a); });
    copy_gbps = 2.0 * double(n) / ms / 1e6;
  }
  double gemm_tflops = 0;
  {
    const int64_t n = 8192;
    Tensor a = random_gpu({n, n}, DType::bf16), b = random_gpu({n, n}, DType::bf16),
           c = Tensor::empty({n, n}, DType::bf16, kGpu);
    const double ms = median_ms([&] { matmul(a, false, b, false, c); });
    gemm_tflops = 2.0 * double(n) * n * n / ms / 1e9;
  }
  std::printf("ceilings: device-to-device copy %.0f GB/s (read + write); cuBLASLt bf16 GEMM 8192^3 %.1f TFLOP/s\n\n",
              copy_gbps, gemm_tflops);
  if (only == "fp8") {
    fp8_tables(prop, gemm_tflops);
    return 0;
  }
  decode_gemm_table(prop);
  grouped_projection_table(prop);
  dependent_launch_table();
  swiglu_projection_table();
  residual_step_table();
  if (only == "decode") return 0;

  std::printf("| GEMM | shape (M x K x N) | ms | TFLOP/s | of 8192^3 |\n|---|---|---:|---:|---:|\n");
  auto gemm = [&](const char* name, int64_t m, int64_t k, int64_t n, bool ta, bool tb, DType dt) {
    gemm_row(name, m, k, n, matmul_ms(m, k, n, ta, tb, dt), gemm_tflops);
  };
  gemm("bf16 NN (8192^3)", 8192, 8192, 8192, false, false, DType::bf16);
  gemm("f32 NN", 4096, 4096, 4096, false, false, DType::f32);
  std::printf("\n");
  fp8_tables(prop, gemm_tflops);  // the 1B training shapes' GEMMs, bf16 and FP8

  std::printf("\n| kernel | shape | ms | GB/s | of copy |\n|---|---|---:|---:|---:|\n");
  const double B2 = 2, B4 = 4;  // bytes of bf16 / f32
  {                             // casts
    const int64_t n = int64_t(1) << 28;
    Tensor x = random_gpu({n}, DType::f32);
    row("cast f32 -> bf16", "256M", median_ms([&] { x.to(DType::bf16); }), n * (B4 + B2));
    Tensor y = x.to(DType::bf16);
    row("cast bf16 -> f32", "256M", median_ms([&] { y.to(DType::f32); }), n * (B4 + B2));
    row("fill bf16", "256M", median_ms([&] { y.fill_(0.5); }), n * B2);
  }
  {  // elementwise and grad norm over a 256M-parameter arena
    const int64_t n = int64_t(1) << 28;
    Tensor acc = random_gpu({n}, DType::f32), g = random_gpu({n}, DType::bf16), g32 = random_gpu({n}, DType::f32);
    row("add_inplace f32 += bf16", "256M", median_ms([&] { add_inplace(acc, g); }), n * (B4 + B2 + B4));
    row("axpy_inplace f32", "256M", median_ms([&] { axpy_inplace(acc, 0.5, g32); }), n * 3 * B4);
    row("scale_inplace f32", "256M", median_ms([&] { scale_inplace(acc, 0.999); }), n * 2 * B4);
    row("sum_squares f32 (grad norm)", "256M", median_ms([&] { sum_squares(g32); }), n * B4);
    row("all_finite bf16", "256M", median_ms([&] { all_finite(g); }), n * B2);
    Tensor p = random_gpu({n}, DType::f32), m = random_gpu({n}, DType::f32, -1e-3, 1e-3),
           v = random_gpu({n}, DType::f32, 0, 1e-4), copy = Tensor::empty({n}, DType::bf16, kGpu);
    const std::vector<AdamWRange> ranges = {{0, n / 2, 0.1}, {n / 2, n, 0.0}};
    int64_t step = 1;
    row("adamw + bf16 copy", "256M", median_ms([&] {
          adamw_update_ranges(p, g32, m, v, ranges, AdamWStep{1e-4, 0.9, 0.95, 1e-8, 0.1, step++}, &copy);
        }),
        n * (2 * B4 + B4 + 2 * B4 + 2 * B4 + B2));
  }
  {  // RMSNorm, full width and per head
    const int64_t tokens = 16384, d = 2048, heads = 16, hd = 128;
    Tensor x = random_gpu({tokens, d}, DType::bf16), w = random_gpu({d}, DType::bf16, 0.5, 1.5),
           dy = random_gpu({tokens, d}, DType::bf16);
    RmsNormOutput out = rms_norm_forward(x, w, 1e-6);
    row("rms_norm fwd bf16", "16384 x 2048", median_ms([&] { rms_norm_forward(x, w, 1e-6); }), tokens * d * 2 * B2);
    row("rms_norm bwd bf16", "16384 x 2048", median_ms([&] { rms_norm_backward(dy, x, w, out.rstd); }),
        tokens * d * 3 * B2);
    // olmo2-190m: 16 x 2048 tokens of width 768.
    Tensor xs = random_gpu({32768, 768}, DType::bf16), dys = random_gpu({32768, 768}, DType::bf16);
    Tensor ws = random_gpu({768}, DType::bf16, 0.5, 1.5);
    RmsNormOutput outs = rms_norm_forward(xs, ws, 1e-6);
    row("rms_norm fwd bf16", "32768 x 768", median_ms([&] { rms_norm_forward(xs, ws, 1e-6); }), xs.numel() * 2 * B2);
    row("rms_norm bwd bf16", "32768 x 768", median_ms([&] { rms_norm_backward(dys, xs, ws, outs.rstd); }),
        xs.numel() * 3 * B2);
    Tensor xh = x.view({tokens * heads, hd}), dyh = dy.view({tokens * heads, hd});
    Tensor wh = random_gpu({hd}, DType::bf16, 0.5, 1.5);
    RmsNormOutput outh = rms_norm_forward(xh, wh, 1e-6);
    row("rms_norm fwd bf16 per-head", "262144 x 128", median_ms([&] { rms_norm_forward(xh, wh, 1e-6); }),
        tokens * d * 2 * B2);
    row("rms_norm bwd bf16 per-head", "262144 x 128", median_ms([&] { rms_norm_backward(dyh, xh, wh, outh.rstd); }),
        tokens * d * 3 * B2);
  }
  {  // RoPE and SwiGLU
    Tensor q = random_gpu({8, 2048, 16, 128}, DType::bf16);
    Tensor pos = Tensor::empty({2048}, DType::i64);
    for (int64_t i = 0; i < 2048; ++i) pos.data<int64_t>()[i] = i;
    Tensor pos_gpu = pos.to(kGpu);
    row("rope fwd bf16", "8 x 2048 x 16 x 128", median_ms([&] { rope_forward(q, pos_gpu, 500000.0); }),
        q.numel() * 2 * B2);
    const int64_t tokens = 16384, ffn = 5632;
    Tensor gate = random_gpu({tokens, ffn}, DType::bf16, -4, 4), up = random_gpu({tokens, ffn}, DType::bf16),
           dy = random_gpu({tokens, ffn}, DType::bf16);
    row("swiglu fwd bf16", "16384 x 5632", median_ms([&] { swiglu_forward(gate, up); }), tokens * ffn * 3 * B2);
    row("swiglu bwd bf16", "16384 x 5632", median_ms([&] { swiglu_backward(dy, gate, up); }), tokens * ffn * 5 * B2);
  }
  {  // embedding: 16384 tokens of a 100K vocabulary, d 2048
    const int64_t tokens = 16384, vocab = 100352, d = 2048;
    Tensor table = random_gpu({vocab, d}, DType::bf16), ids = random_ids_gpu(tokens, vocab);
    row("embedding fwd bf16", "16384 ids, 100352 x 2048", median_ms([&] { embedding_forward(ids, table); }),
        tokens * d * 2 * B2);
    Tensor gout = random_gpu({tokens, d}, DType::bf16), gtable = Tensor::zeros({vocab, d}, DType::f32, kGpu);
    // Bytes: grad_out read once, each touched f32 table row read and written (~all ids distinct here).
    row("embedding bwd bf16 -> f32", "16384 ids, 100352 x 2048",
        median_ms([&] { embedding_backward(ids, gout, gtable); }), tokens * d * (B2 + 2 * B4));
  }
  {  // cross-entropy over a 100K vocabulary
    const int64_t rows = 8192, vocab = 100352 + 5;
    Tensor logits = random_gpu({rows, vocab}, DType::bf16, -8, 8), targets = random_ids_gpu(rows, vocab);
    CrossEntropyOutput out = cross_entropy_forward(logits, targets, 1e-4, -100);
    row("cross_entropy fwd bf16", "8192 x 100357",
        median_ms([&] { cross_entropy_forward(logits, targets, 1e-4, -100); }), double(rows) * vocab * B2);
    const Tensor one = Tensor::full({}, 1.0, DType::f32, kGpu);
    Tensor grad = Tensor::empty({rows, vocab}, DType::bf16, kGpu);
    row("cross_entropy bwd bf16", "8192 x 100357",
        median_ms([&] { cross_entropy_backward_into(one, logits, targets, out.lse, 1e-4, -100, grad); }),
        double(rows) * vocab * 2 * B2);
    // The training step's chunk (linear_cross_entropy): forward and gradient in one pass, in place.
    const int64_t chunk = 5312;
    Tensor chunk_logits = random_gpu({chunk, 100352}, DType::bf16, -8, 8),
           chunk_targets = random_ids_gpu(chunk, 100352);
    row("cross_entropy fused bf16", "5312 x 100352",
        median_ms([&] { cross_entropy_forward_with_grad(chunk_logits, chunk_targets, 1e-4, -100, one, false); }),
        double(chunk) * 100352 * 2 * B2);
  }
  {  // sampling the next token of a decode step on the device (bytes: the logits read once; the kernel
     // makes several passes over each row, from L2 where the batch fits)
    for (const int64_t vocab : {int64_t(50304), int64_t(128256)})
      for (const int64_t batch : {int64_t(1), int64_t(8), int64_t(32)}) {
        Tensor logits = random_gpu({batch, vocab}, DType::bf16, -8, 8);
        std::vector<int64_t> indices(static_cast<size_t>(batch));
        for (int64_t b = 0; b < batch; ++b) indices[size_t(b)] = b;
        const Tensor draws = Tensor::from_vector(indices, {batch}).to(kGpu);
        const std::string shape = std::to_string(batch) + " x " + std::to_string(vocab);
        row("sample_rows bf16 top-k 50", shape,
            median_ms([&] { sample_rows(logits, {.temperature = 0.8, .top_k = 50, .seed = 1}, draws); }),
            double(batch) * vocab * B2);
        row("sample_rows bf16 top-p 0.9", shape,
            median_ms([&] { sample_rows(logits, {.temperature = 0.8, .top_p = 0.9, .seed = 1}, draws); }),
            double(batch) * vocab * B2);
      }
  }
  {  // greedy decoding's choice: each row's argmax, several blocks a row (bytes: the logits read once)
    for (const int64_t vocab : {int64_t(100352), int64_t(128256)})
      for (const int64_t batch : {int64_t(1), int64_t(8), int64_t(32)}) {
        const Tensor logits = random_gpu({batch, vocab}, DType::bf16, -8, 8);
        Tensor ids = Tensor::empty({batch}, DType::i32, kGpu);
        row("argmax_rows bf16", std::to_string(batch) + " x " + std::to_string(vocab),
            median_ms([&] { argmax_rows_into(logits, ids); }), double(batch) * vocab * B2);
      }
  }
  const MemoryStats s = allocator_for(kGpu).stats(kGpu);
  std::printf("\nallocator: current %.2f GiB, peak %.2f GiB, cached %.2f GiB\n", s.current / 1073741824.0,
              s.peak / 1073741824.0, s.cached / 1073741824.0);
  return 0;
}

#else
#include <cstdio>
int main() {
  std::printf("bench_cuda_kernels: this build of fathom has no CUDA backend\n");
  return 0;
}
#endif
