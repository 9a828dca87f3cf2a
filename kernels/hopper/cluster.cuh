// Thread-block clusters (sm_90): the blocks of a cluster run at once on one GPC and can write each other's
// shared memory. A kernel launched in clusters (launch_kernel_in_clusters, kernels/runtime/dependent_launch.cuh)
// uses the cluster's barrier in two phases: every thread arrives (relaxed) as it starts and waits before its first
// store into a peer's shared memory, so no store reaches a block that has not started; then it arrives (release)
// after its stores and waits (acquire) before anything reads them. A thread that exits counts as arrived, so a block
// with nothing to do may leave at once, as long as no peer writes into its shared memory.
#pragma once
#include <cstdint>

namespace fathom::cuda {

__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// The address of `local` (this block's shared memory) in the shared memory of the cluster's block `rank`, as a
// generic pointer that ordinary loads and stores use.
template <typename T>
__device__ __forceinline__ T* cluster_peer(T* local, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t peer;
  asm("mapa.u64 %0, %1, %2;\n" : "=l"(peer) : "l"(reinterpret_cast<uint64_t>(local)), "r"(rank));
  return reinterpret_cast<T*>(peer);
#else
  __trap();  // no clusters below sm_90: a kernel that maps a peer must not run there
  return local;
#endif
}

}  // namespace fathom::cuda
