// Tensor wrappers of the MoDA CUDA launchers (see moda_tensor.h). Shapes were checked by the
// dispatch in kernels/moda_attention.cpp; here: devices, dtypes, outputs and scratch.
#include "kernels/cuda/moda/moda_tensor.h"

#include "kernels/cuda/runtime/argument_checks.h"
#include "kernels/cuda/runtime/runtime.h"

namespace fathom::cuda {

namespace {

void check_device_tensor(const char* op, const char* name, const Tensor& t, DType dtype, Device device) {
  cuda::check_device_tensor(op, name, t, dtype, device,
                            "the CUDA MoDA kernels compute bf16 attention with fp32 statistics and depth gradients");
}

void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth) {
  const Device device = q.device();
  FATHOM_CHECK(device.is_cuda(), op, ": q ", describe(q), " is not on a CUDA device");
  check_device_tensor(op, "q", q, DType::bf16, device);
  check_device_tensor(op, "k", k, DType::bf16, device);
  check_device_tensor(op, "v", v, DType::bf16, device);
  check_device_tensor(op, "depth k", depth.k, DType::bf16, device);
  check_device_tensor(op, "depth v", depth.v, DType::bf16, device);
}

ModaShape shape_of(const Tensor& q, const Tensor& k, const DepthSlots& depth, double scale) {
  ModaShape s;
  s.seq = FlashShape{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), scale};
  s.slots = depth.k.dim(2);
  s.slot_begin = depth.begin;
  s.slot_end = depth.end;
  return s;
}

// Device scratch of `bytes` from the device's allocator (none for 0). It returns to the allocator
// when the caller's Tensor dies, before the kernels ran: safe, since the caching allocator hands a
// block out again only in this stream's order.
Tensor scratch(size_t bytes, Device device) {
  return bytes > 0 ? Tensor::empty({int64_t(bytes)}, DType::u8, device) : Tensor();
}

}  // namespace

AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale, ModaKernel kernel) {
  const char* op = "moda_attention (cuda)";
  check_inputs(op, q, k, v, depth);
  const Device device = q.device();
  const ModaShape s = shape_of(q, k, depth, scale);
  AttentionOutput out{Tensor::empty(q.shape(), DType::bf16, device),
                      Tensor::empty({s.seq.B, s.seq.Hq, s.seq.T}, DType::f32, device)};
  const size_t workspace_bytes = moda_forward_workspace_bytes(kernel, s);
  Tensor workspace = scratch(workspace_bytes, device);
  ModaParams p;
  p.shape = s;
  p.q = q.data<bf16>();
  p.k = k.data<bf16>();
  p.v = v.data<bf16>();
  p.depth_k = depth.k.data<bf16>();
  p.depth_v = depth.v.data<bf16>();
  p.o = out.o.data<bf16>();
  p.lse = out.lse.data<float>();
  p.workspace = workspace_bytes > 0 ? workspace.raw() : nullptr;
  p.workspace_bytes = workspace_bytes;
  moda_attention_forward(kernel, p, stream_for(device));
  return out;
}

namespace {

// The backward's outputs and launch parameters but for where the depth terms go; `launch` fills that in.
template <class Depth>
AttentionGrads backward(const char* op, const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                        const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale, ModaKernel kernel,
                        Depth&& set_depth) {
  check_inputs(op, q, k, v, depth);
  const Device device = q.device();
  check_device_tensor(op, "o", o, DType::bf16, device);
  check_device_tensor(op, "grad_o", grad_o, DType::bf16, device);
  check_device_tensor(op, "lse", lse, DType::f32, device);
  const ModaShape s = shape_of(q, k, depth, scale);
  AttentionGrads grads{Tensor::empty(q.shape(), DType::bf16, device), Tensor::empty(k.shape(), DType::bf16, device),
                       Tensor::empty(v.shape(), DType::bf16, device)};
  const size_t workspace_bytes = moda_backward_workspace_bytes(kernel, s);
  Tensor workspace = scratch(workspace_bytes, device);
  ModaBackwardParams p;
  p.shape = s;
  p.q = q.data<bf16>();
  p.k = k.data<bf16>();
  p.v = v.data<bf16>();
  p.depth_k = depth.k.data<bf16>();
  p.depth_v = depth.v.data<bf16>();
  p.o = o.data<bf16>();
  p.grad_o = grad_o.data<bf16>();
  p.lse = lse.data<float>();
  p.dq = grads.dq.data<bf16>();
  p.dk = grads.dk.data<bf16>();
  p.dv = grads.dv.data<bf16>();
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
  check_device_tensor(op, "d_depth_k", d_depth_k, DType::f32, q.device());
  check_device_tensor(op, "d_depth_v", d_depth_v, DType::f32, q.device());
  return backward(op, grad_o, q, k, v, depth, o, lse, scale, kernel, [&](ModaBackwardParams& p) {
    p.d_depth_k = d_depth_k.data<float>();
    p.d_depth_v = d_depth_v.data<float>();
    p.store_depth_grads = mode == DepthGradMode::store;
  });
}

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       DepthWeights& weights) {
  const char* op = "moda_attention_backward (cuda, depth weights)";
  check_device_tensor(op, "weights p", weights.p, DType::f32, q.device());
  check_device_tensor(op, "weights ds", weights.ds, DType::f32, q.device());
  return backward(op, grad_o, q, k, v, depth, o, lse, scale, ModaKernel::group, [&](ModaBackwardParams& p) {
    p.depth_weights_p = weights.p.data<float>();
    p.depth_weights_ds = weights.ds.data<float>();
  });
}

}  // namespace fathom::cuda
