// Tensor wrappers of the MoDA CUDA launchers (see moda_tensor.h). Shapes were checked by the
// dispatch in kernels/moda/moda_attention.cpp; here: devices, dtypes, outputs and scratch.
#include "kernels/moda/moda_tensor.h"

#include "kernels/attention/attention_host.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr const char* kComputes =
    "the CUDA MoDA kernels compute bf16 attention with fp32 statistics and depth gradients";

void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth) {
  const Device device = q.device();
  check_current_device(op, device);
  check_attention_tensors(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"depth k", &depth.k}, {"depth v", &depth.v}},
                          DType::bf16, device, kComputes);
}

ModaShape shape_of(const Tensor& q, const Tensor& k, const DepthSlots& depth, double scale) {
  ModaShape s;
  s.seq = sequence_shape_of(q, k, scale);
  s.slots = depth.k.dim(2);
  s.slot_begin = depth.begin;
  s.slot_end = depth.end;
  return s;
}

}  // namespace

AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale, ModaKernel kernel) {
  const char* op = "moda_attention (cuda)";
  check_inputs(op, q, k, v, depth);
  const Device device = q.device();
  const ModaShape s = shape_of(q, k, depth, scale);
  AttentionOutput out = empty_attention_output(q);
  const size_t workspace_bytes = moda_forward_workspace_bytes(kernel, s);
  Tensor workspace = device_scratch(workspace_bytes, device);
  ModaParams p;
  p.shape = s;
  set_forward_pointers(p, q, k, v, out);
  p.depth_k = depth.k.data<bf16>();
  p.depth_v = depth.v.data<bf16>();
  p.workspace = workspace_bytes > 0 ? workspace.raw() : nullptr;
  p.workspace_bytes = workspace_bytes;
  moda_attention_forward(kernel, p, stream_for(device));
  return out;
}

AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale) {
  return cuda::moda_attention_forward(q, k, v, depth, scale, ModaKernel::group);
}

namespace {

// The backward's outputs and launch parameters but for where the depth terms go; `launch` fills that in.
template <class Depth>
AttentionGrads backward(const char* op, const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                        const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale, ModaKernel kernel,
                        Depth&& set_depth) {
  check_inputs(op, q, k, v, depth);
  const Device device = q.device();
  check_attention_tensors(op, {{"o", &o}, {"grad_o", &grad_o}}, DType::bf16, device, kComputes);
  check_attention_tensors(op, {{"lse", &lse}}, DType::f32, device, kComputes);
  const ModaShape s = shape_of(q, k, depth, scale);
  AttentionGrads grads = empty_attention_grads(q, k, v);
  const size_t workspace_bytes = moda_backward_workspace_bytes(kernel, s);
  Tensor workspace = device_scratch(workspace_bytes, device);
  ModaBackwardParams p;
  p.shape = s;
  set_backward_pointers(p, grad_o, q, k, v, o, lse, grads);
  p.depth_k = depth.k.data<bf16>();
  p.depth_v = depth.v.data<bf16>();
  set_depth(p);
  p.workspace = workspace_bytes > 0 ? workspace.raw() : nullptr;
  p.workspace_bytes = workspace_bytes;
  moda_attention_backward(kernel, p, stream_for(device));
  return grads;
}

}  // namespace

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode, ModaKernel kernel) {
  const char* op = "moda_attention_backward (cuda)";
  check_attention_tensors(op, {{"d_depth_k", &d_depth_k}, {"d_depth_v", &d_depth_v}}, DType::f32, q.device(),
                          kComputes);
  return backward(op, grad_o, q, k, v, depth, o, lse, scale, kernel, [&](ModaBackwardParams& p) {
    p.d_depth_k = d_depth_k.data<float>();
    p.d_depth_v = d_depth_v.data<float>();
    p.store_depth_grads = mode == DepthGradMode::store;
  });
}

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode) {
  return cuda::moda_attention_backward(grad_o, q, k, v, depth, o, lse, scale, d_depth_k, d_depth_v, mode,
                                       ModaKernel::group);
}

bool moda_depth_weights_supported(const Tensor& q, const Tensor& k) {
  return cuda::moda_depth_weights_supported(q.dim(2) / k.dim(2), q.dim(3));
}

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       DepthWeights& weights) {
  const char* op = "moda_attention_backward (cuda, depth weights)";
  check_attention_tensors(op, {{"weights p", &weights.p}, {"weights ds", &weights.ds}}, DType::f32, q.device(),
                          kComputes);
  return backward(op, grad_o, q, k, v, depth, o, lse, scale, ModaKernel::group, [&](ModaBackwardParams& p) {
    p.depth_weights_p = weights.p.data<float>();
    p.depth_weights_ds = weights.ds.data<float>();
  });
}

}  // namespace fathom::cuda
