// Host entry points of the MoDA kernel families, called by moda_launch.cu after it has checked
// the arguments once: the naive baseline (moda_naive.cu) and the flash family (moda_flash.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/moda/moda_launch.h"

namespace fathom::cuda::moda {

size_t naive_forward_workspace_bytes(const ModaShape& shape);
size_t naive_backward_workspace_bytes(const ModaShape& shape);
void naive_forward(const ModaParams& params, cudaStream_t stream);
void naive_backward(const ModaBackwardParams& params, cudaStream_t stream);

// The largest G the group kernel folds into one query tile (a token's heads never straddle tiles).
int group_max_heads(int64_t d);
// flat, chunk and group (`kernel` picks the layout).
size_t flash_backward_workspace_bytes(ModaKernel kernel, const ModaShape& shape);
void flash_forward(ModaKernel kernel, const ModaParams& params, cudaStream_t stream);
void flash_backward(ModaKernel kernel, const ModaBackwardParams& params, cudaStream_t stream);

}  // namespace fathom::cuda::moda
