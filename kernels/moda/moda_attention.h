// MoDA attention (DESIGN.md 4.2): every query head reads, in ONE softmax, its layer's causal
// sequence keys and the depth slots that earlier layers wrote at the same token:
//   o_t = (sum_{j<=t} e^{a_j} v_j + sum_{i in slots} e^{b_i} vd_{t,i}) / (sum e^{a_j} + sum e^{b_i})
//   a_j = q_t . k_j * scale,  b_i = q_t . kd_{t,i} * scale.
// Layouts: q [B, T, Hq, d]; k, v [B, T, Hk, d]; depth_k, depth_v [B, T, S, Hk, d] (token-major,
// slot-minor); the softmax reads slots [slot_begin, slot_end). Query head h reads KV head h / G.
// DTypes: q, k, v and the depth buffers share one dtype (F32/F64 on the CPU, BF16 on CUDA); lse and
// the depth gradient buffers are in stats_dtype of it (F32 for BF16), as several readers add into them.
// On CUDA the production kernel (group) runs; kernels/moda/moda_tensor.h can pick another.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "kernels/attention/attention.h"
#include "kernels/dispatch.h"

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

// A reader's depth terms kept as weights instead of gradients: for each query row (b, t, h) and slot
// begin + i of the range, the joint softmax probability p and the scaled score gradient
// ds = scale * p (dO . vd - dO . O), [B, T, Hq, L] each, in stats_dtype. A slot's gradients are
// then sums over its readers and each KV head's G query heads (depth_slot_grads):
//   d_depth_k[t, i, hk] = sum ds[t, hG + g, i] q[t, hG + g],  d_depth_v[t, i, hk] = sum p[...] dO[t, hG + g].
// Formed once per writer, they cost each (reader, slot) pair a read of the reader's q and dO rows
// instead of an fp32 read-add-write of both gradients by every reader.
struct DepthWeights {
  Tensor p, ds;
};
// Whether moda_attention_backward can return weights for these inputs: always on the CPU; on CUDA,
// the group kernel's dQ walk (G <= 16), where an m-tile holds every row of its tokens.
bool moda_depth_weights_supported(const Tensor& q, const Tensor& k);
// As above, with the depth terms returned as weights (allocated here) instead of added to buffers.
AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       DepthWeights& weights);

// What depth_slot_grads needs of one reader: its q and dO [B, T, Hq, d] and weights over [begin, end).
struct DepthReader {
  Tensor q, grad_o;
  DepthWeights weights;
  int64_t begin = 0, end = 0;
};
struct SlotGrads {
  Tensor k, v;  // [B, T, Hk, d]
};
// The gradients of slots [first, last) summed over `readers` (in their order; a reader adds to the
// slots of its range only), in `dtype` (the writers': F32/F64 on the CPU, F32 or BF16 on CUDA).
std::vector<SlotGrads> depth_slot_grads(const std::vector<const DepthReader*>& readers, int64_t first, int64_t last,
                                        int64_t kv_heads, DType dtype);

// Copies x [B, T, Hk, d] into slot `slot` of a depth buffer [B, T, S, Hk, d], and back out. x has the
// buffer's dtype, or is F32 into a BF16 buffer (converted, rounding to nearest even). A read returns
// the slot in the buffer's dtype, or converted to `dtype` on the way (an F32 gradient buffer read out
// for a BF16 writer takes one pass, not a copy and a cast).
void write_depth_slot(Tensor& buffer, int64_t slot, const Tensor& x);
Tensor read_depth_slot(const Tensor& buffer, int64_t slot);
Tensor read_depth_slot(const Tensor& buffer, int64_t slot, DType dtype);
// Sets slots [begin, end) of a depth buffer to zero.
void zero_depth_slots(Tensor& buffer, int64_t begin, int64_t end);

// The backends' entry points, one per function above (read_depth_slot's with the dtype to return). CUDA
// (kernels/moda/moda_tensor.h) runs the group kernel: q, k, v, o, grad_o, dq, dk, dv and the depth k/v in BF16,
// lse, the depth gradient buffers and the weights in F32; its slot copies take F32 or BF16 buffers.
using ModaAttentionForwardKernel = AttentionOutput(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const DepthSlots& depth, double scale);
using ModaAttentionBackwardKernel = AttentionGrads(const Tensor& grad_o, const Tensor& q, const Tensor& k,
                                                   const Tensor& v, const DepthSlots& depth, const Tensor& o,
                                                   const Tensor& lse, double scale, Tensor& d_depth_k,
                                                   Tensor& d_depth_v, DepthGradMode mode);
using ModaAttentionBackwardWeightsKernel = AttentionGrads(const Tensor& grad_o, const Tensor& q, const Tensor& k,
                                                          const Tensor& v, const DepthSlots& depth, const Tensor& o,
                                                          const Tensor& lse, double scale, DepthWeights& weights);
using ModaDepthWeightsSupportedKernel = bool(const Tensor& q, const Tensor& k);
using DepthSlotGradsKernel = std::vector<SlotGrads>(const std::vector<const DepthReader*>& readers, int64_t first,
                                                    int64_t last, int64_t kv_heads, DType dtype);
using WriteDepthSlotKernel = void(Tensor& buffer, int64_t slot, const Tensor& x);
using ReadDepthSlotKernel = Tensor(const Tensor& buffer, int64_t slot, DType dtype);
using ZeroDepthSlotsKernel = void(Tensor& buffer, int64_t begin, int64_t end);
FATHOM_BACKENDS(ModaAttentionForwardKernel, moda_attention_forward)
FATHOM_BACKENDS(ModaAttentionBackwardKernel, moda_attention_backward)
FATHOM_BACKENDS(ModaAttentionBackwardWeightsKernel, moda_attention_backward)
FATHOM_BACKENDS(ModaDepthWeightsSupportedKernel, moda_depth_weights_supported)
FATHOM_BACKENDS(DepthSlotGradsKernel, depth_slot_grads)
FATHOM_BACKENDS(WriteDepthSlotKernel, write_depth_slot)
FATHOM_BACKENDS(ReadDepthSlotKernel, read_depth_slot)
FATHOM_BACKENDS(ZeroDepthSlotsKernel, zero_depth_slots)

}  // namespace fathom
