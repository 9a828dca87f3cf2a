// The practical ceiling of a memory-bound benchmark: the device's copy bandwidth, measured in the same process.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/median.h"
#include "core/tensor.h"
#include "train/cli/device_select.h"

namespace fathom::bench {

// The copy bandwidth of `device` in bytes/s, read + write counted: a buffer of `bytes` copied device-to-device
// (host memcpy on the CPU), median of 7 samples of 5 copies after one warm-up copy.
inline double copy_bandwidth(Device device, size_t bytes) {
  const Tensor src = Tensor::zeros({int64_t(bytes)}, DType::u8, device);
  Tensor dst = Tensor::empty({int64_t(bytes)}, DType::u8, device);
  dst.copy_from(src);
  synchronize(device);
  constexpr int kCopies = 5;
  std::vector<double> samples;
  for (int s = 0; s < 7; ++s) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < kCopies; ++c) dst.copy_from(src);
    synchronize(device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back(2.0 * double(bytes) * kCopies / seconds);
  }
  return median(samples);
}

}  // namespace fathom::bench
