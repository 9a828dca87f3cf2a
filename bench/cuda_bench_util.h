// What the CUDA kernel benchmarks share: checked runtime calls, fresh random bf16 inputs uploaded to
// the device, and the median of a set of timings. Include only where FATHOM_WITH_CUDA is set.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/median.h"
#include "core/dtype.h"

namespace fathom::bench {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "benchmark: %s failed: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

// Prints device 0's name and SM count after `program`'s header line; false (after saying so) where
// there is no CUDA device, so the program can exit cleanly with nothing to measure.
inline bool describe_device(const char* program, const char* timing_note) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("%s: no CUDA device; nothing to measure\n", program);
    return false;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs%s\n\n", prop.name, prop.multiProcessorCount, timing_note);
  return true;
}

// Uniform bf16 values in [-amplitude, amplitude) from a per-call seeded xorshift.
inline std::vector<bf16> random_bf16(size_t n, uint64_t seed, float amplitude) {
  std::vector<bf16> out(n);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < int64_t((n + 65535) / 65536); ++chunk) {
      uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(chunk) * 0xBF58476D1CE4E5B9ull + 1);
      const size_t end = std::min(n, size_t(chunk + 1) * 65536);
      for (size_t i = size_t(chunk) * 65536; i < end; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const float u = float(x >> 40) / float(1 << 24);  // [0, 1)
        out[i] = float_to_bf16(amplitude * (2.f * u - 1.f));
      }
    }
  }
  return out;
}

template <class T>
T* device_alloc(size_t n) {
  T* dev = nullptr;
  check(cudaMalloc(&dev, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  return dev;
}

template <class T>
T* upload(const std::vector<T>& host) {
  T* dev = device_alloc<T>(host.size());
  check(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return dev;
}

}  // namespace fathom::bench
