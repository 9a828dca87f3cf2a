// Flash attention entry points: argument checks, scratch sizing, width dispatch and the Tensor
// wrappers. The kernels are in attention_forward.cuh and attention_backward.cuh.
#include "kernels/attention/flash_attention.h"

#include <cstdint>

#include "kernels/attention/attention_fp32.h"
#include "kernels/attention/attention_host.h"
#include "kernels/attention/attention_launch.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

using flash::BackwardArgs;
using flash::bf16_t;
using flash::dev;
using flash::ForwardArgs;

constexpr int64_t kMaxGridRows = 65535;  // B * H rides on gridDim.y

void check_shape(const char* op, const FlashShape& s) {
  check_sequence_shape(op, s);
  FATHOM_CHECK(s.d % 8 == 0 && s.d <= 128, op, ": head dim d = ", s.d,
               " is not supported by the CUDA kernels (a multiple of 8, at most 128)");
  FATHOM_CHECK(s.B * s.Hq <= kMaxGridRows, op, ": B * Hq = ", s.B * s.Hq, " exceeds ", kMaxGridRows);
}

flash::BackwardScratch scratch_of(const FlashShape& s) {
  return flash::backward_scratch_for(s.B, s.T, s.Hq, s.Hk, s.d);
}

}  // namespace

size_t flash_backward_workspace_bytes(const FlashShape& s) { return scratch_of(s).bytes(); }

void flash_attention_forward(const FlashParams& p, cudaStream_t stream) {
  const char* op = "flash_attention_forward";
  const FlashShape& s = p.shape;
  check_shape(op, s);
  check_forward_pointers(op, p);
  const ForwardArgs a{dev(p.q),  dev(p.k),         dev(p.v), dev(p.o),
                      p.lse,     int(s.B),         int(s.T), int(s.Hq),
                      int(s.Hk), int(s.Hq / s.Hk), int(s.d), float(s.scale * double(flash::kLog2e))};
  flash::dispatch_width(a.d, [&]<int D>() { flash::launch_forward<typename flash::Fastest<D>::Forward>(a, stream); });
}

void flash_attention_backward(const FlashBackwardParams& p, cudaStream_t stream) {
  const char* op = "flash_attention_backward";
  const FlashShape& s = p.shape;
  check_shape(op, s);
  check_backward_pointers(op, p);
  check_pointer(op, "workspace", p.workspace, 16);
  const size_t need = flash_backward_workspace_bytes(s);
  FATHOM_CHECK(p.workspace_bytes >= need, op, ": workspace of ", p.workspace_bytes, " bytes is too small, need ", need);
  const flash::BackwardScratch scratch = scratch_of(s);
  BackwardArgs a{dev(p.q),         dev(p.k), dev(p.v),       dev(p.o),
                 dev(p.grad_o),    p.lse,    dev(p.dq),      dev(p.dk),
                 dev(p.dv),        nullptr,  nullptr,        int(s.B),
                 int(s.T),         0,        int(s.Hq),      int(s.Hk),
                 int(s.Hq / s.Hk), int(s.d), float(s.scale), float(s.scale * double(flash::kLog2e))};
  scratch.place(a, p.workspace);
  flash::launch_backward_prepare(a, stream);
  flash::dispatch_width(a.d, [&]<int D>() { flash::launch_backward_passes<D>(a, stream, scratch); });
}

// ---- Tensor level: the CUDA backend's entry points (kernels/attention/attention.h) ----

namespace {
constexpr const char* kComputes = "CUDA attention runs the flash kernels on BF16 and the fp32 kernels on F32";
}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  // F32 (train.precision: fp32) runs the fp32 kernels; BF16 the flash kernels.
  if (q.dtype() == DType::f32) return attention_forward_fp32(q, k, v, scale);
  const char* op = "attention (cuda)";
  const Device device = q.device();
  check_attention_tensors(op, {{"q", &q}, {"k", &k}, {"v", &v}}, DType::bf16, device, kComputes);
  check_current_device(op, device);
  AttentionOutput out = empty_attention_output(q);
  FlashParams p;
  p.shape = sequence_shape_of(q, k, scale);
  set_forward_pointers(p, q, k, v, out);
  flash_attention_forward(p, stream_for(device));
  return out;
}

AttentionGrads attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& o, const Tensor& lse, double scale) {
  if (q.dtype() == DType::f32) return attention_backward_fp32(grad_o, q, k, v, o, lse, scale);
  const char* op = "attention_backward (cuda)";
  const Device device = q.device();
  check_attention_tensors(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}, {"grad_o", &grad_o}}, DType::bf16, device,
                          kComputes);
  check_attention_tensors(op, {{"lse", &lse}}, DType::f32, device, kComputes);
  check_current_device(op, device);
  AttentionGrads grads = empty_attention_grads(q, k, v);
  FlashBackwardParams p;
  p.shape = sequence_shape_of(q, k, scale);
  set_backward_pointers(p, grad_o, q, k, v, o, lse, grads);
  const size_t scratch_bytes = flash_backward_workspace_bytes(p.shape);
  Tensor scratch = device_scratch(scratch_bytes, device);
  p.workspace = scratch.raw();
  p.workspace_bytes = scratch_bytes;
  flash_attention_backward(p, stream_for(device));
  return grads;
}

}  // namespace fathom::cuda
