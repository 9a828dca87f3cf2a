// Helpers for the GPU tests: they compile in every build and skip themselves where no CUDA device is
// usable (a build without CUDA, or a machine without a GPU). Comparisons follow docs/DESIGN.md section 8:
// relative L2 error against the CPU reference, about 1e-5 in f32 and 1e-2 in bf16.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "tests/support/op_test_util.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/runtime/backend.h"
#include "kernels/runtime/runtime.h"
#endif

namespace fathom::test {

// Whether the kernel shows any NVIDIA GPU (a device node, or a GPU the driver registered; /dev/dxg
// under WSL). Without one the CUDA driver cannot find a device either, but asking it costs about a
// second per test process (ctest runs every test in its own), so a GPU test skips without asking.
inline bool nvidia_gpu_visible() {
  std::error_code error;
  namespace fs = std::filesystem;
  if (fs::exists("/dev/nvidia0", error) || fs::exists("/dev/dxg", error)) return true;
  const fs::path gpus = "/proc/driver/nvidia/gpus";
  return fs::is_directory(gpus, error) && !fs::is_empty(gpus, error);
}

// Probes once per process: whether the CUDA backend started; false where there is none.
inline bool gpu_present() {
#ifdef FATHOM_WITH_CUDA
  static const bool present = nvidia_gpu_visible() && cuda::init();
  return present;
#else
  return false;
#endif
}

#define FATHOM_REQUIRE_GPU()                                                     \
  do {                                                                           \
    if (!::fathom::test::gpu_present()) GTEST_SKIP() << "no usable CUDA device"; \
  } while (0)

inline const Device kGpu = Device::cuda(0);

#ifdef FATHOM_WITH_CUDA
// The stream fathom's tensor operations run on (non-blocking, so NOT ordered with the legacy default
// stream): tests that launch kernels directly on tensors they just filled launch them here.
inline cudaStream_t tensor_stream() { return cuda::stream_for(kGpu); }
#endif

// ||got - want|| / ||want|| over all elements, in f64 on the host (any dtypes and devices).
inline double relative_l2(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values(got.to(Device::cpu())), w = values(want.to(Device::cpu()));
  EXPECT_EQ(g.size(), w.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;  // NaN never passes
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The tolerance for a GPU result of dtype t against the f32 CPU reference.
inline double tolerance_for(DType t) { return t == DType::bf16 ? 1e-2 : 1e-5; }

#define EXPECT_GPU_CLOSE(got, want, dtype, what)                                                     \
  do {                                                                                               \
    const double fathom_err_ = ::fathom::test::relative_l2(got, want);                               \
    EXPECT_LE(fathom_err_, ::fathom::test::tolerance_for(dtype)) << (what) << ": relative L2 error"; \
  } while (0)

// Random values on the GPU in `dtype`, and the same values (exactly) as an F32 CPU tensor for the
// reference: the inputs are rounded to dtype first, so both sides see identical numbers.
struct GpuInput {
  Tensor gpu;
  Tensor cpu;  // F32
};
inline GpuInput random_input(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  const Tensor rounded = random_tensor(shape, dtype, seed, low, high);  // host, in dtype
  return {rounded.to(kGpu), rounded.to(DType::f32)};
}

// Bitwise equality of two tensors' bytes (determinism checks).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

}  // namespace fathom::test
