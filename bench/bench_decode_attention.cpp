// Decode attention benchmark on the GPU: one new token per sequence (Tq = 1) against a KV cache of
// 128 to 64K positions, at batch 1 and 32, for a 190M-like shape (Hq = Hk = 12, d = 64), a 1B-like one
// (Hq = Hk = 16, d = 128) and a GQA one (Hq = 32, Hk = 8, d = 128); then MoDA rows with 2 slots per
// earlier layer of a 16-layer model (30 slots) in the same softmax.
// Decode is bandwidth bound, so each row reports the bytes that must move (the K and V cache,
// B * Hk * length * d * 2 bytes each, plus q, o and the depth slots) over the median time, against
// the device's copy bandwidth measured first in the same process (bench/copy_bandwidth.h; it counts a copy's
// reads and writes, the rows their reads, so 100% is a practical, not an absolute, ceiling). CUDA events around each
// call (both kernels and the allocations of the output and partials) after warm-up, median of many runs. The cache is
// replicated so that consecutive runs read different copies, from 1024 positions on more than the 50 MB L2 in
// all: those figures are DRAM, not L2, bandwidth (the shorter caches' are latency). Rows without depth slots are timed
// two or three times: splits merged by the combine kernel, by the split kernel's counter (FATHOM_MERGE_IN_SPLIT never
// and always, the cluster merge off), and where the rule lets the launch merge in a thread-block cluster (at most 8
// splits of one tile each, each of at most as many blocks as SMs: the short caches at small batch;
// FATHOM_MERGE_IN_CLUSTER on, decode_attention.h).
// Usage: bench_decode_attention [reps]   (default 50)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifdef FATHOM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "bench/copy_bandwidth.h"
#include "bench/cuda_bench_util.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/runtime/backend.h"

using namespace fathom;

namespace {

const Device kGpu = Device::cuda(0);
constexpr double kMaxCacheBytes = 40e9;  // per copy; the largest case here is 8.6 GB
constexpr double kMinRotationBytes = 256e6;

// A bf16 tensor on the GPU filled by repeating 4M random values (multi-GB caches in a moment).
Tensor random_gpu(const Shape& shape, uint64_t seed, float amplitude) {
  const size_t n = size_t(shape.numel()), block = std::min<size_t>(n, size_t(1) << 22);
  const std::vector<bf16> host = bench::random_bf16(block, seed, amplitude);
  Tensor t = Tensor::empty(shape, DType::bf16, kGpu);
  bf16* dst = t.data<bf16>();
  bench::check(cudaMemcpy(dst, host.data(), block * sizeof(bf16), cudaMemcpyHostToDevice), "upload");
  for (size_t at = block; at < n; at += block)
    bench::check(cudaMemcpy(dst + at, dst, std::min(block, n - at) * sizeof(bf16), cudaMemcpyDeviceToDevice), "tile");
  return t;
}

struct Row {
  const char* model;
  int64_t Hq, Hk, d;
};

int reps = 50;
double copy_gbs = 0;  // the ceiling the rows are measured against, GB/s

void run(const Row& m, int64_t B, int64_t length, int64_t slots) {
  const double cache_bytes = 2.0 * double(B * m.Hk * length * m.d) * 2;
  if (cache_bytes > kMaxCacheBytes) {
    std::printf("| %s | %lld | %lld | %lld | skipped (%.0f GB cache) | | | | | | |\n", m.model, (long long)B,
                (long long)length, (long long)slots, cache_bytes / 1e9);
    return;
  }
  const int64_t Tq = 1, S = slots;
  const double bytes = cache_bytes + 2.0 * double(B * Tq * m.Hq * m.d) * 2 + 2.0 * double(B * Tq * S * m.Hk * m.d) * 2;
  const int copies = int(std::clamp(kMinRotationBytes / cache_bytes, 1.0, 16.0));
  uint64_t seed = 1;
  const Tensor q = random_gpu({B, Tq, m.Hq, m.d}, seed++, 2.f);
  std::vector<Tensor> ks, vs;
  for (int i = 0; i < copies; ++i) {
    ks.push_back(random_gpu({B, m.Hk, length, m.d}, seed++, 2.f));
    vs.push_back(random_gpu({B, m.Hk, length, m.d}, seed++, 1.f));
  }
  DepthSlots depth;
  if (S > 0)
    depth = {random_gpu({B, Tq, S, m.Hk, m.d}, seed++, 2.f), random_gpu({B, Tq, S, m.Hk, m.d}, seed++, 1.f), 0, S};
  const double scale = 1.0 / std::sqrt(double(m.d));

  cudaStream_t stream = cuda::current_stream(0);
  cudaEvent_t start, stop;
  bench::check(cudaEventCreate(&start), "event");
  bench::check(cudaEventCreate(&stop), "event");
  // The median ms of a call with the splits merged where `merge` and `cluster` say.
  const auto median_ms = [&](Usage merge, Toggle cluster = Toggle::off) {
    set_merge_in_split_policy(merge);
    set_merge_in_cluster_choice(cluster);
    std::vector<double> times;
    for (int r = -3; r < reps; ++r) {
      const int c = (r + 3) % copies;
      bench::check(cudaEventRecord(start, stream), "record");
      decode_attention(q, ks[size_t(c)], vs[size_t(c)], length, depth, scale);
      bench::check(cudaEventRecord(stop, stream), "record");
      bench::check(cudaEventSynchronize(stop), "sync");
      float ms = 0;
      bench::check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
      if (r >= 0) times.push_back(ms);
    }
    return bench::median(times);
  };
  const Usage in_force = merge_in_split_policy();
  const Toggle cluster_in_force = merge_in_cluster_choice();
  set_merge_in_split_policy(Usage::always);
  set_merge_in_cluster_choice(Toggle::on);
  const int64_t R = Tq * m.Hq / m.Hk;
  const bool mergeable = merges_in_split(R, S > 0, 1);
  const bool clustered = cuda::decode_attention_merge(B, m.Hk, R, length, S > 0, false, kGpu) == DecodeMerge::cluster;
  const double ms = median_ms(Usage::never), gbs = bytes / ms / 1e6;
  std::printf("| %s | %lld | %lld | %lld | %.4f | %.0f | %.0f%% |", m.model, (long long)B, (long long)length,
              (long long)slots, ms, gbs, 100.0 * gbs / copy_gbs);
  if (mergeable) {
    const double merged = median_ms(Usage::always);
    std::printf(" %.4f | %.2fx |", merged, ms / merged);
  } else {
    std::printf(" | |");
  }
  if (clustered) {
    const double merged = median_ms(Usage::never, Toggle::on);
    std::printf(" %.4f | %.2fx |\n", merged, ms / merged);
  } else {
    std::printf(" | |\n");
  }
  set_merge_in_split_policy(in_force);
  set_merge_in_cluster_choice(cluster_in_force);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) reps = std::max(1, std::atoi(argv[1]));
  if (!cuda::init()) {
    std::printf("bench_decode_attention: no CUDA device; nothing to measure\n");
    return 0;
  }
  if (!bench::describe_device("bench_decode_attention", ", Tq = 1, median of runs, bf16 caches")) return 0;
  const Row rows[] = {{"190M-like Hq 12 Hk 12 d 64", 12, 12, 64},
                      {"1B-like Hq 16 Hk 16 d 128", 16, 16, 128},
                      {"GQA Hq 32 Hk 8 d 128", 32, 8, 128}};
  copy_gbs = bench::copy_bandwidth(kGpu, size_t(1) << 30) / 1e9;
  std::printf("copy bandwidth (device-to-device, 1 GiB, read + write): %.0f GB/s\n\n", copy_gbs);
  std::printf(
      "| shape | B | cache length | depth slots | ms | GB/s | of the copy bandwidth | counter's merge ms "
      "| its speed-up | cluster's merge ms | its speed-up |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& m : rows)
    for (int64_t B : {1, 32})
      for (int64_t length : {128, 512, 1024, 4096, 16384, 65536}) run(m, B, length, 0);
  for (const Row& m : rows)
    for (int64_t B : {1, 32}) run(m, B, 4096, 30);
  return 0;
}

#else
#include <cstdio>
int main() {
  std::printf("bench_decode_attention: this build of fathom has no CUDA backend\n");
  return 0;
}
#endif
