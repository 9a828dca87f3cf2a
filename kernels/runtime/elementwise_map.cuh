// One grid-stride kernel for every elementwise op: op.template apply<N>(i) handles elements
// [i, i + N). The packed variant moves N elements per access when every pointer the op touches is
// aligned to its pack; the remaining tail (and unaligned tensors) go one element at a time.
#pragma once
#include <cuda_runtime.h>

#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

template <int N, typename Op>
__global__ void map_kernel(int64_t n, Op op) {
  follow_previous_grid();  // dependent_launch.cuh
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / N;
  for (int64_t p = first; p < packs; p += stride) op.template apply<N>(p * N);
  if constexpr (N > 1)
    for (int64_t i = packs * N + first; i < n; i += stride) op.template apply<1>(i);
}

// Runs op over n elements on `stream`, packed by N when `packed`.
template <int N, typename Op>
void run_map(int64_t n, bool packed, const Op& op, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  if (packed && N > 1)
    launch_kernel(map_kernel<N, Op>, dim3(grid_for((n + N - 1) / N, kThreads, 16384)), dim3(kThreads), 0, stream, n,
                  op);
  else
    launch_kernel(map_kernel<1, Op>, dim3(grid_for(n, kThreads, 16384)), dim3(kThreads), 0, stream, n, op);
}

}  // namespace fathom::cuda
