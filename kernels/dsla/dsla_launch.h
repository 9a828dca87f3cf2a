// Host-side helpers of the DSLA kernels: the compile-time shape dispatch and optional pointers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/dsla/dsla.h"

namespace fathom::cuda {

// Runs f.template operator()<D, TWO>() for head dimension d (64 or 128) and the number of states.
template <typename F>
void dispatch_dsla_shape(int64_t d, bool two, F&& f) {
  auto with_d = [&]<int D>() {
    if (two)
      f.template operator()<D, true>();
    else
      f.template operator()<D, false>();
  };
  if (d == 64) return with_d.template operator()<64>();
  if (d == 128) return with_d.template operator()<128>();
  FATHOM_FAIL("dsla: the CUDA kernels take head dimension 64 or 128, got ", d);
}

// An F32 tensor's data, or null where it is undefined.
inline float* optional_data(const Tensor& t) {
  return t.defined() ? static_cast<float*>(const_cast<Tensor&>(t).raw()) : nullptr;
}
// A tensor's data as the kernels read it (F32, or BF16 as CUDA's type), or null where it is undefined.
inline const float* f32_data(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw()) : nullptr; }
inline const __nv_bfloat16* bf16_data(const Tensor& t) {
  return t.defined() ? static_cast<const __nv_bfloat16*>(t.raw()) : nullptr;
}

// The tensor-core chunked kernels (dsla_tensor_core.cu): BF16 q, k, v (and grad_o) whose data are 16-byte
// aligned. F32 inputs take the SIMT kernels (dsla_forward.cu, dsla_backward.cu), which keep fp32 operands.
bool dsla_tensor_core_applies(std::initializer_list<const Tensor*> tensors);
// keep_scores: out.scores gets the chunks' scaled intra-chunk scores for the backward (kernels/dsla/dsla.h).
void dsla_tensor_core_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                              const Tensor& gamma, const DslaState& initial, bool keep_scores, DslaForward& out);
// One pass of the tensor-core kernels' chunk starting states (dsla_state_pass.cu), into `starts`
// [B, H, NS, N, D, D] bf16 with chunks of 64. keys: x = k, y = v, forward from `initial` (zeros when null),
// the fp32 end state into `final_state` where not null. Otherwise x = q, y = grad_o, the state gradients
// in reverse from zero, and `later` [B, H, NS, N, D] fp32 gets each chunk's gate-gradient share of the
// later chunks, from the forward-order `states`.
struct DslaStatePass {
  bool keys;
  const Tensor &x, &y, &g1, &g2;
  Tensor& starts;
  const DslaState* initial = nullptr;
  DslaState* final_state = nullptr;
  const Tensor* states = nullptr;
  Tensor* later = nullptr;
};
void dsla_chunk_states(const DslaStatePass& pass);
// The backward kernels' arguments (device pointers; chunks of 64, N of them).
struct DslaBackwardArgs {
  const __nv_bfloat16 *grad_o, *q, *k, *v;
  const float *g1, *g2, *gamma;
  const __nv_bfloat16 *states, *dstates;  // S_n and dH_n, [B, H, NS, N, D, D]
  const __nv_bfloat16* scores;            // the forward's scale A, [B, H, NS, N, 64, 64]
  __nv_bfloat16 *dq, *dk, *dv;            // dk, dv written here directly when every KV head has one query head
  float *dk_heads, *dv_heads;             // [B, T, H, D] otherwise, summed over each KV head's group after
  float *dg1, *dg2;
  const float* later;   // [B, H, NS, N, D]: each chunk's gate-gradient share of the later chunks, unweighted
  float* dgamma_parts;  // [B, H, N]
  int64_t B, T_len;
  int H, Hk, N, D;
};
// dq, dk (or dk_heads) and the gate gradients (dsla_query_key_grads.cu).
void dsla_query_key_grads(const DslaBackwardArgs& args, cudaStream_t stream);
// dv (or dv_heads) and dgamma_parts from the forward's kept scores (dsla_value_grads.cu).
void dsla_value_grads(const DslaBackwardArgs& args, cudaStream_t stream);
// scores: the forward's kept scores, or undefined (the forward's output kernel runs again for them).
void dsla_tensor_core_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& g1, const Tensor& g2, const Tensor& gamma, const Tensor& scores,
                               DslaGrads& grads);

}  // namespace fathom::cuda
