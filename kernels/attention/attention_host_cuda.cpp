#include "kernels/attention/attention_host.h"

#include <cuda_runtime_api.h>

#include <cmath>

#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

void check_sequence_shape(const char* op, const FlashShape& s) {
  FATHOM_CHECK(s.B > 0 && s.T > 0 && s.Hq > 0 && s.Hk > 0 && s.d > 0, op, ": sizes must be positive, got B = ", s.B,
               ", T = ", s.T, ", Hq = ", s.Hq, ", Hk = ", s.Hk, ", d = ", s.d);
  FATHOM_CHECK(s.Hq % s.Hk == 0, op, ": query heads Hq = ", s.Hq, " must be a multiple of KV heads Hk = ", s.Hk);
  FATHOM_CHECK(std::isfinite(s.scale) && s.scale > 0, op, ": scale must be finite and positive, got ", s.scale);
  FATHOM_CHECK(s.T <= (int64_t(1) << 30), op, ": sequence length T = ", s.T, " exceeds 2^30");
}

void check_attention_tensors(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors,
                             DType dtype, Device device, const char* why) {
  for (const auto& [name, t] : tensors) check_device_tensor(op, name, *t, dtype, device, why);
}

void check_current_device(const char* op, Device device) {
  FATHOM_CHECK(device.is_cuda(), op, ": the tensors are on ", device.str(), ", not on a CUDA device");
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  FATHOM_CHECK(current == device.index, op, ": tensors are on ", device.str(),
               " but the current device is cuda:", current);
}

FlashShape sequence_shape_of(const Tensor& q, const Tensor& k, double scale) {
  FATHOM_CHECK(q.rank() == 4 && k.rank() == 4, "attention: q ", describe(q), " and k ", describe(k),
               " must be [B, T, H, d]");
  return FlashShape{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), scale};
}

AttentionOutput empty_attention_output(const Tensor& q) {
  return {Tensor::empty(q.shape(), q.dtype(), q.device()),
          Tensor::empty({q.dim(0), q.dim(2), q.dim(1)}, DType::f32, q.device())};
}

AttentionGrads empty_attention_grads(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {Tensor::empty(q.shape(), q.dtype(), q.device()), Tensor::empty(k.shape(), k.dtype(), q.device()),
          Tensor::empty(v.shape(), v.dtype(), q.device())};
}

Tensor device_scratch(size_t bytes, Device device) {
  return bytes > 0 ? Tensor::empty({int64_t(bytes)}, DType::u8, device) : Tensor();
}

}  // namespace fathom::cuda
