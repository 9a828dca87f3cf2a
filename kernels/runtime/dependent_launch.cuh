// Programmatic dependent launch (sm_90): a kernel launched with it (launch_kernel below, where
// dependent_launch.h's choice is on) may start while the kernel ahead of it on the stream is still
// running. Until it calls wait_for_previous_grid it may prefetch anything into L2 (which is coherent), but
// it may load only what no grid ahead of it writes (a decoding step's weights), and it must write nothing. Every
// kernel here lets the next grid launch only after its own wait, so only the grid directly ahead can still run
// then; a kernel that let it launch earlier would leave grids two or more back running too. After the call every
// write of every grid ahead is visible, because each of them waited for its own grid ahead before it could
// exit. A kernel ahead calls allow_dependent_grids once it no longer needs the SMs to itself: the dependent
// kernel's CTAs may take SMs as soon as every CTA ahead has called it (or exited), so a later grid never holds SMs
// an earlier one's CTAs still need. Both are no-ops in a kernel launched the ordinary way. Every kernel given to
// launch_kernel must wait before it touches memory other than by such loads. The choice is ignored
// on a device below compute capability 9.0 and in a build with a pass below sm_90 (supports_sm90_launches).
// launch_kernel_in_clusters launches in thread-block clusters as well (kernels/hopper/cluster.cuh).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "kernels/runtime/dependent_launch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

// kernel<<<grid, block, smem, stream>>>(args...) in thread-block clusters of `cluster` blocks along x (0: no
// cluster attribute; sm_90, at most 8, dividing grid.x), as a programmatic dependent launch where
// FATHOM_DEPENDENT_LAUNCH is on (dependent_launch.h). The kernel must wait for the grid ahead
// (wait_for_previous_grid or follow_previous_grid) before it touches what that grid writes.
template <typename... Params, typename... Args>
void launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, int smem, cudaStream_t stream,
                               unsigned cluster, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (dependent_launch() == Toggle::on && current_device_supports_sm90_launches()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 0) {
    FATHOM_CHECK(grid.x % cluster == 0, "launch_kernel_in_clusters: clusters of ", cluster,
                 " blocks do not divide a grid of ", grid.x, " along x");
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = size_t(smem);
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  CUDA_CHECK_LAUNCH();
}

// The same without clusters.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, int smem, cudaStream_t stream, Args&&... args) {
  launch_kernel_in_clusters(kernel, grid, block, smem, stream, 0, std::forward<Args>(args)...);
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

// The first statement of a kernel launched with launch_kernel that has nothing to do before its inputs
// are ready: waits for the grid ahead, then lets the next grid launch (a decoding step's next GEMM takes its SMs, and
// may ask L2 for its first weights, while this kernel runs).
__device__ __forceinline__ void follow_previous_grid() {
  wait_for_previous_grid();
  allow_dependent_grids();
}

// Asks L2 for `bytes` (a multiple of 16) at `p` (16-byte aligned) without waiting for them: the loads
// that follow find them there.
__device__ __forceinline__ void prefetch_to_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}

}  // namespace fathom::cuda
