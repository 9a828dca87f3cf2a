// Flash attention on CUDA: causal grouped-query attention in bf16 with fp32 accumulation, on the
// tensor cores (mma.sync m16n8k16). The forward pass returns O and the log-sum-exp; the backward pass
// is deterministic (every sum in a fixed order: two runs give bit-identical gradients).
//
// Two levels:
//  - raw launchers over device pointers (cudaMalloc'd buffers, any stream), used by the tests and the
//    benchmark and by anything that manages its own memory;
//  - at the Tensor level, the CUDA backend's attention_forward and attention_backward, declared in
//    kernels/attention/attention.h (flash_attention.cu): bf16 q, k, v, o, grad_o on one CUDA device and
//    an f32 lse run these kernels, F32 inputs the fp32 kernels of attention_fp32.h. Outputs and the
//    backward scratch come from the device's registered allocator; kernels run on its current stream.
// Head dims: any d that is a multiple of 8 up to 128; d = 64 and 128 run the full-width kernels,
// smaller d run the 32/64-wide kernels with zero-padded columns.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/attention/attention.h"

namespace fathom::cuda {

// Geometry of one call. Every tensor is contiguous: q, o, grad_o, dq are [B, T, Hq, d]; k, v, dk, dv
// are [B, T, Hk, d] with Hq = G * Hk (query head h reads KV head h / G); lse is [B, Hq, T] in fp32
// (natural log of the softmax denominator of the scaled scores).
struct FlashShape {
  int64_t B = 0, T = 0, Hq = 0, Hk = 0, d = 0;
  double scale = 0;  // multiplies q . k before the softmax (usually 1 / sqrt(d))
};

struct FlashParams {
  FlashShape shape;
  const bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  bf16* o = nullptr;
  float* lse = nullptr;
};

struct FlashBackwardParams {
  FlashShape shape;
  const bf16* q = nullptr;
  const bf16* k = nullptr;
  const bf16* v = nullptr;
  const bf16* o = nullptr;       // the forward output
  const bf16* grad_o = nullptr;  // dL/dO
  const float* lse = nullptr;    // the forward log-sum-exp
  bf16* dq = nullptr;
  bf16* dk = nullptr;  // summed over the G query heads of each KV head
  bf16* dv = nullptr;
  void* workspace = nullptr;  // device scratch of flash_backward_workspace_bytes(shape), 16-byte aligned
  size_t workspace_bytes = 0;
};

// Device scratch the backward pass needs: per-row softmax statistics and, where the dK/dV grid is
// too small to fill the GPU (short sequences), fp32 dK/dV partial sums.
size_t flash_backward_workspace_bytes(const FlashShape& shape);

// Enqueue the kernels on `stream`; argument errors throw fathom::Error before anything is launched.
void flash_attention_forward(const FlashParams& params, cudaStream_t stream);
void flash_attention_backward(const FlashBackwardParams& params, cudaStream_t stream);

}  // namespace fathom::cuda
