// Flash attention entry points: argument checks, scratch sizing, width dispatch and the Tensor
// wrappers. The kernels are in attention_forward.cuh and attention_backward.cuh.
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/runtime/runtime.h"
#include "kernels/cuda/runtime/argument_checks.h"

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/attention_launch.cuh"

namespace fathom::cuda {

namespace {

using flash::BackwardArgs;
using flash::bf16_t;
using flash::dev;
using flash::ForwardArgs;

constexpr int64_t kMaxGridRows = 65535;  // B * H rides on gridDim.y

void check_shape(const char* op, const FlashShape& s) {
  FATHOM_CHECK(s.B > 0 && s.T > 0 && s.Hq > 0 && s.Hk > 0 && s.d > 0, op,
               ": sizes must be positive, got B = ", s.B, ", T = ", s.T, ", Hq = ", s.Hq, ", Hk = ", s.Hk,
               ", d = ", s.d);
  FATHOM_CHECK(s.Hq % s.Hk == 0, op, ": query heads Hq = ", s.Hq, " must be a multiple of KV heads Hk = ", s.Hk);
  FATHOM_CHECK(s.d % 8 == 0 && s.d <= 128, op, ": head dim d = ", s.d,
               " is not supported by the CUDA kernels (a multiple of 8, at most 128)");
  // Positive: the kernels keep each row's running max over raw scores.
  FATHOM_CHECK(std::isfinite(s.scale) && s.scale > 0, op, ": scale must be finite and positive, got ", s.scale);
  FATHOM_CHECK(s.B * s.Hq <= kMaxGridRows, op, ": B * Hq = ", s.B * s.Hq, " exceeds ", kMaxGridRows);
  FATHOM_CHECK(s.T <= (int64_t(1) << 30), op, ": sequence length T = ", s.T, " exceeds 2^30");
}


}  // namespace

namespace {

flash::BackwardScratch scratch_of(const FlashShape& s) { return flash::backward_scratch_for(s.B, s.T, s.Hq, s.Hk, s.d); }

}  // namespace

size_t flash_backward_workspace_bytes(const FlashShape& s) { return scratch_of(s).bytes(); }

void flash_attention_forward(const FlashParams& p, cudaStream_t stream) {
  const char* op = "flash_attention_forward";
  const FlashShape& s = p.shape;
  check_shape(op, s);
  check_pointer(op, "q", p.q, 16);
  check_pointer(op, "k", p.k, 16);
  check_pointer(op, "v", p.v, 16);
  check_pointer(op, "o", p.o, 16);
  check_pointer(op, "lse", p.lse, 4);
  const ForwardArgs a{dev(p.q),     dev(p.k),     dev(p.v),      dev(p.o),     p.lse,         int(s.B),
                      int(s.T),     int(s.Hq),    int(s.Hk),     int(s.Hq / s.Hk), int(s.d),
                      float(s.scale * double(flash::kLog2e))};
  flash::dispatch_width(a.d, [&]<int D>() { flash::launch_forward<typename flash::Fastest<D>::Forward>(a, stream); });
}

void flash_attention_backward(const FlashBackwardParams& p, cudaStream_t stream) {
  const char* op = "flash_attention_backward";
  const FlashShape& s = p.shape;
  check_shape(op, s);
  check_pointer(op, "q", p.q, 16);
  check_pointer(op, "k", p.k, 16);
  check_pointer(op, "v", p.v, 16);
  check_pointer(op, "o", p.o, 16);
  check_pointer(op, "grad_o", p.grad_o, 16);
  check_pointer(op, "lse", p.lse, 4);
  check_pointer(op, "dq", p.dq, 16);
  check_pointer(op, "dk", p.dk, 16);
  check_pointer(op, "dv", p.dv, 16);
  check_pointer(op, "workspace", p.workspace, 16);
  const size_t need = flash_backward_workspace_bytes(s);
  FATHOM_CHECK(p.workspace_bytes >= need, op, ": workspace of ", p.workspace_bytes, " bytes is too small, need ",
               need);
  const flash::BackwardScratch scratch = scratch_of(s);
  BackwardArgs a{dev(p.q),  dev(p.k),  dev(p.v),  dev(p.o),   dev(p.grad_o),
                 p.lse,     dev(p.dq), dev(p.dk), dev(p.dv),  nullptr,
                 nullptr,   int(s.B),  int(s.T),  0,          int(s.Hq),
                 int(s.Hk), int(s.Hq / s.Hk),     int(s.d),   float(s.scale),
                 float(s.scale * double(flash::kLog2e))};
  scratch.place(a, p.workspace);
  flash::launch_backward_prepare(a, stream);
  flash::dispatch_width(a.d, [&]<int D>() { flash::launch_backward_passes<D>(a, stream, scratch); });
}

// ---- Tensor wrappers ----

namespace {

void check_device_tensor(const char* op, const char* name, const Tensor& t, DType dtype, Device device) {
  cuda::check_device_tensor(op, name, t, dtype, device, "the CUDA kernels compute bf16 attention with fp32 statistics");
}

FlashShape shape_of(const Tensor& q, const Tensor& k, double scale) {
  FATHOM_CHECK(q.rank() == 4 && k.rank() == 4, "attention: q ", describe(q), " and k ", describe(k),
               " must be [B, T, H, d]");
  return FlashShape{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), scale};
}

void check_current_device(const char* op, Device device) {
  int current = -1;
  flash::check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  FATHOM_CHECK(current == device.index, op, ": tensors are on ", device.str(), " but the current device is cuda:",
               current);
}

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const char* op = "attention (cuda)";
  const Device device = q.device();
  check_device_tensor(op, "q", q, DType::bf16, device);
  check_device_tensor(op, "k", k, DType::bf16, device);
  check_device_tensor(op, "v", v, DType::bf16, device);
  check_current_device(op, device);
  const FlashShape s = shape_of(q, k, scale);
  AttentionOutput out{Tensor::empty(q.shape(), DType::bf16, device), Tensor::empty({s.B, s.Hq, s.T}, DType::f32, device)};
  FlashParams p;
  p.shape = s;
  p.q = q.data<bf16>();
  p.k = k.data<bf16>();
  p.v = v.data<bf16>();
  p.o = out.o.data<bf16>();
  p.lse = out.lse.data<float>();
  flash_attention_forward(p, stream_for(device));
  return out;
}

AttentionGrads attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& o, const Tensor& lse, double scale) {
  const char* op = "attention_backward (cuda)";
  const Device device = q.device();
  check_device_tensor(op, "q", q, DType::bf16, device);
  check_device_tensor(op, "k", k, DType::bf16, device);
  check_device_tensor(op, "v", v, DType::bf16, device);
  check_device_tensor(op, "o", o, DType::bf16, device);
  check_device_tensor(op, "grad_o", grad_o, DType::bf16, device);
  check_device_tensor(op, "lse", lse, DType::f32, device);
  check_current_device(op, device);
  const FlashShape s = shape_of(q, k, scale);
  AttentionGrads grads{Tensor::empty(q.shape(), DType::bf16, device), Tensor::empty(k.shape(), DType::bf16, device),
                       Tensor::empty(v.shape(), DType::bf16, device)};
  const size_t scratch_bytes = flash_backward_workspace_bytes(s);
  Tensor scratch = Tensor::empty({int64_t(scratch_bytes)}, DType::u8, device);
  FlashBackwardParams p;
  p.shape = s;
  p.q = q.data<bf16>();
  p.k = k.data<bf16>();
  p.v = v.data<bf16>();
  p.o = o.data<bf16>();
  p.grad_o = grad_o.data<bf16>();
  p.lse = lse.data<float>();
  p.dq = grads.dq.data<bf16>();
  p.dk = grads.dk.data<bf16>();
  p.dv = grads.dv.data<bf16>();
  p.workspace = scratch.raw();
  p.workspace_bytes = scratch_bytes;
  // The scratch returns to the allocator when this function exits, before the kernels have run:
  // safe, since the caching allocator hands a block out again only in this stream's order.
  flash_attention_backward(p, stream_for(device));
  return grads;
}

}  // namespace fathom::cuda
