// Programmatic dependent launch (sm_90): a kernel launched with it (launch_kernel below, where
// dependent_launch.h's choice is on) may start while the kernel ahead of it on the stream is still
// running. Until it calls wait_for_previous_grid it may prefetch anything into L2 (which is coherent), but
// it may load only what the kernel ahead does not write (a decoding step's weights), and it must write
// nothing; after the call every write of the kernel ahead is visible. A kernel ahead calls
// allow_dependent_grids once it no longer needs the SMs to itself: the dependent kernel's CTAs may take
// SMs as soon as every CTA ahead has called it (or exited). Both are no-ops in a kernel launched the
// ordinary way, and in code built for an architecture below sm_90 (fathom builds sm_90a).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

// kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent launch where `dependent`.
template <typename... Params, typename... Args>
void launch_kernel(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  CUDA_CHECK_LAUNCH();
}

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Asks L2 for `bytes` (a multiple of 16) at `p` (16-byte aligned) without waiting for them: the loads
// that follow find them there.
__device__ __forceinline__ void prefetch_to_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}

}  // namespace fathom::cuda
