// MoDA on CUDA at the Tensor level (what kernels/moda/moda_attention.cpp dispatches to): argument checks,
// output and workspace allocation from the device's allocator, and the launch on the device's
// current stream. The attention kernels are the launchers of kernels/moda/moda_launch.h.
//   q, k, v, o, grad_o, dq, dk, dv, depth k/v: BF16; lse and the depth gradient buffers: F32.
// The backend's entry points are declared in kernels/moda/moda_attention.h; they run the group kernel:
//  - moda_attention_backward adds (or stores) the depth gradients of slots [depth.begin, depth.end) in
//    d_depth_k and d_depth_v; with DepthWeights, the weights are allocated by the caller, [B, T, Hq, L] F32;
//  - depth_slot_grads (kernels/moda/depth_slot_grads.cu): q and dO BF16, weights F32; the gradients in
//    `dtype`, F32 or BF16;
//  - the slot copies (kernels/moda/depth_slots.cu). write: x of the buffer's dtype, or F32 into BF16
//    (rounded to nearest even); buffers F32 or BF16. read: returns the slot converted to `dtype` (F32 or
//    BF16).
#pragma once
#include "kernels/moda/moda_attention.h"
#include "kernels/moda/moda_launch.h"

namespace fathom::cuda {

// The entry points' forward and backward with another of the four kernels.
AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale, ModaKernel kernel);
AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode, ModaKernel kernel);

}  // namespace fathom::cuda
