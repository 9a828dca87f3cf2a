// MoDA attention (DESIGN.md 3.2): every query head reads, in ONE softmax, its layer's causal
// sequence keys and the depth slots that earlier layers wrote at the same token:
//   o_t = (sum_{j<=t} e^{a_j} v_j + sum_{i in slots} e^{b_i} vd_{t,i}) / (sum e^{a_j} + sum e^{b_i})
//   a_j = q_t . k_j * scale,  b_i = q_t . kd_{t,i} * scale.
// Layouts: q [B, T, Hq, d]; k, v [B, T, Hk, d]; depth_k, depth_v [B, T, S, Hk, d] (token-major,
// slot-minor); the softmax reads slots [slot_begin, slot_end). Query head h reads KV head h / G.
// DTypes: q, k, v and the depth buffers share one dtype (F32/F64 on the CPU, BF16 on CUDA); lse and
// the depth gradient buffers are in stats_dtype of it (F32 for BF16), as several readers add into them.
// On CUDA the production kernel (group) runs; kernels/cuda/moda_tensor.h can pick another.
#pragma once
#include "core/tensor.h"
#include "kernels/attention.h"

namespace fathom {

struct DepthSlots {
  Tensor k, v;  // [B, T, S, Hk, d]
  int64_t begin = 0, end = 0;
};

// How a backward pass puts the depth gradients of its slot range into the shared gradient buffers:
// added to what they hold, or stored over it (the first reader of those slots: nothing to zero or
// read back).
enum class DepthGradMode { add, store };

// Returns o [B, T, Hq, d] and lse [B, Hq, T] over both memories. With an empty slot range this is
// exactly causal attention.
AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale);
// dq, dk, dv as for attention; the depth gradients of slots [begin, end) are added into (or stored
// in) d_depth_k and d_depth_v ([B, T, S, Hk, d]), which several readers share; other slots are left
// alone.
AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode = DepthGradMode::add);

// Copies x [B, T, Hk, d] into slot `slot` of a depth buffer [B, T, S, Hk, d], and back out. x has the
// buffer's dtype, or is F32 into a BF16 buffer (converted, rounding to nearest even). A read returns
// the slot in the buffer's dtype, or converted to `dtype` on the way (an F32 gradient buffer read out
// for a BF16 writer takes one pass, not a copy and a cast).
void write_depth_slot(Tensor& buffer, int64_t slot, const Tensor& x);
Tensor read_depth_slot(const Tensor& buffer, int64_t slot);
Tensor read_depth_slot(const Tensor& buffer, int64_t slot, DType dtype);
// Sets slots [begin, end) of a depth buffer to zero.
void zero_depth_slots(Tensor& buffer, int64_t begin, int64_t end);

namespace cpu {
void write_depth_slot(Tensor& buffer, int64_t slot, const Tensor& x);
Tensor read_depth_slot(const Tensor& buffer, int64_t slot);
void zero_depth_slots(Tensor& buffer, int64_t begin, int64_t end);
AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale);
AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode);
}  // namespace cpu

}  // namespace fathom
