// Causal grouped-query attention in fp32 on CUDA: the attention of `train.precision: fp32` and of
// fp32 decoding, where the flash kernels (flash_attention.h) would round q, k and v to bf16. Plain CUDA
// cores, every product and sum in fp32; slow next to the flash kernels, and meant for runs that ask
// for fp32 numerics. The backward pass is deterministic (no atomics: every sum in a fixed order).
//
// Layouts as the flash kernels': q, o, grad_o, dq [B, T, Hq, d]; k, v, dk, dv [B, T, Hk, d] with
// Hq = G * Hk (query head h reads KV head h / G); lse [B, Hq, T] (natural log). Any head dim up to
// kFp32AttentionMaxHeadDim, any T.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/flash_attention.h"

namespace fathom::cuda {

constexpr int64_t kFp32AttentionMaxHeadDim = 256;

struct Fp32AttentionParams {
  FlashShape shape;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* o = nullptr;
  float* lse = nullptr;
};

struct Fp32AttentionBackwardParams {
  FlashShape shape;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* o = nullptr;       // the forward output
  const float* grad_o = nullptr;  // dL/dO
  const float* lse = nullptr;     // the forward log-sum-exp
  float* dq = nullptr;
  float* dk = nullptr;  // summed over the G query heads of each KV head
  float* dv = nullptr;
  float* delta = nullptr;  // device scratch of B * Hq * T floats
};

// Raw launchers over device pointers; argument errors throw fathom::Error before anything is launched.
void fp32_attention_forward(const Fp32AttentionParams& params, cudaStream_t stream);
void fp32_attention_backward(const Fp32AttentionBackwardParams& params, cudaStream_t stream);

// Tensor level (F32 tensors on one CUDA device, the current one): what the CUDA backend's attention_forward
// and attention_backward (flash_attention.cu) run for F32. Outputs come from the device's allocator; kernels
// run on its stream.
AttentionForwardKernel attention_forward_fp32;
AttentionBackwardKernel attention_backward_fp32;

// Decode attention (kernels/attention/decode_attention.h) in fp32 without depth slots: q [B, Tq, Hq, d]
// reads the KV caches [B, Hk, capacity, d] up to `length`, or sequence b up to past_b + Tq read on the
// device (past I32 [1]: past_b = past[0]; I32 [B]: past[b]; at most the capacity), so that a decoding
// step replays as a CUDA graph. The caller has checked the
// shapes and the length against the capacity.
Tensor decode_attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t length,
                             double scale);
Tensor decode_attention_fp32(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& past,
                             double scale);

}  // namespace fathom::cuda
