#include "kernels/moda_attention.h"

#include "kernels/dispatch.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/cuda/moda_tensor.h"
#endif

namespace fathom {

namespace {
void check_slot_range(const char* op, const Tensor& buffer, int64_t begin, int64_t end) {
  FATHOM_CHECK(0 <= begin && begin <= end && end <= buffer.dim(2), op, ": slot range [", begin, ", ", end,
               ") outside the buffer's ", buffer.dim(2), " slots");
}
void check_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth) {
  FATHOM_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, op, ": q, k, v must be [B, T, H, d], got ",
               describe(q), ", ", describe(k), ", ", describe(v));
  FATHOM_CHECK(k.shape() == v.shape(), op, ": k ", describe(k), " and v ", describe(v), " differ");
  const int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), d = q.dim(3), Hk = k.dim(2);
  FATHOM_CHECK(k.dim(0) == B && k.dim(1) == T && k.dim(3) == d, op, ": q ", describe(q), " and k ", describe(k),
               " disagree in batch, length or head dim");
  FATHOM_CHECK(Hk > 0 && Hq % Hk == 0, op, ": ", Hq, " query heads are not a multiple of ", Hk, " KV heads");
  FATHOM_CHECK(depth.k.rank() == 5 && depth.k.shape() == depth.v.shape(), op,
               ": depth k/v must both be [B, T, S, Hk, d], got ", describe(depth.k), " and ", describe(depth.v));
  const Shape& ds = depth.k.shape();
  FATHOM_CHECK(ds[0] == B && ds[1] == T && ds[3] == Hk && ds[4] == d, op, ": depth buffer ", describe(depth.k),
               " does not match q ", describe(q), " and ", Hk, " KV heads");
  check_slot_range(op, depth.k, depth.begin, depth.end);
  FATHOM_CHECK(q.dtype() == k.dtype() && k.dtype() == v.dtype() && v.dtype() == depth.k.dtype() &&
                   depth.k.dtype() == depth.v.dtype(),
               op, ": all inputs must share one dtype");
}
void check_slot(const char* op, const Tensor& buffer, int64_t slot, const Shape& x) {
  FATHOM_CHECK(buffer.rank() == 5, op, ": a depth buffer is [B, T, S, Hk, d], got ", describe(buffer));
  FATHOM_CHECK(slot >= 0 && slot < buffer.dim(2), op, ": slot ", slot, " outside the buffer's ", buffer.dim(2), " slots");
  const Shape& b = buffer.shape();
  FATHOM_CHECK(x == Shape({b[0], b[1], b[3], b[4]}), op, ": slot shape ", x.str(), " does not match depth buffer ",
               b.str());
}

}  // namespace

void write_depth_slot(Tensor& buffer, int64_t slot, const Tensor& x) {
  check_slot("write_depth_slot", buffer, slot, x.shape());
  // The one conversion a write makes: F32 activations into a BF16 depth buffer (the GPU's).
  FATHOM_CHECK(x.dtype() == buffer.dtype() || (x.dtype() == DType::f32 && buffer.dtype() == DType::bf16),
               "write_depth_slot: ", describe(x), " into a ", dtype_name(buffer.dtype()),
               " depth buffer (the values must have its dtype, or be F32 into BF16)");
  if (common_device("write_depth_slot", {&buffer, &x}).is_cpu())
    return cpu::write_depth_slot(buffer, slot, x.to(buffer.dtype()));
#ifdef FATHOM_WITH_CUDA
  cuda::write_depth_slot(buffer, slot, x);
#else
  no_cuda_kernel("write_depth_slot");
#endif
}

Tensor read_depth_slot(const Tensor& buffer, int64_t slot) { return read_depth_slot(buffer, slot, buffer.dtype()); }

Tensor read_depth_slot(const Tensor& buffer, int64_t slot, DType dtype) {
  const Shape& b = buffer.shape();
  check_slot("read_depth_slot", buffer, slot, buffer.rank() == 5 ? Shape({b[0], b[1], b[3], b[4]}) : Shape());
  if (buffer.is_cpu()) return cpu::read_depth_slot(buffer, slot).to(dtype);
#ifdef FATHOM_WITH_CUDA
  return cuda::read_depth_slot(buffer, slot, dtype);
#else
  no_cuda_kernel("read_depth_slot");
#endif
}

void zero_depth_slots(Tensor& buffer, int64_t begin, int64_t end) {
  FATHOM_CHECK(buffer.rank() == 5, "zero_depth_slots: a depth buffer is [B, T, S, Hk, d], got ", describe(buffer));
  check_slot_range("zero_depth_slots", buffer, begin, end);
  if (buffer.is_cpu()) return cpu::zero_depth_slots(buffer, begin, end);
#ifdef FATHOM_WITH_CUDA
  cuda::zero_depth_slots(buffer, begin, end);
#else
  no_cuda_kernel("zero_depth_slots");
#endif
}

AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale) {
  check_shapes("moda_attention", q, k, v, depth);
  if (common_device("moda_attention", {&q, &k, &v, &depth.k, &depth.v}).is_cpu())
    return cpu::moda_attention_forward(q, k, v, depth, scale);
#ifdef FATHOM_WITH_CUDA
  return cuda::moda_attention_forward(q, k, v, depth, scale);
#else
  no_cuda_kernel("moda_attention");
#endif
}

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode) {
  check_shapes("moda_attention_backward", q, k, v, depth);
  FATHOM_CHECK(grad_o.shape() == q.shape() && o.shape() == q.shape(),
               "moda_attention_backward: grad_o and o must have q's shape ", q.shape().str());
  FATHOM_CHECK(grad_o.dtype() == q.dtype() && o.dtype() == q.dtype(), "moda_attention_backward: grad_o ",
               describe(grad_o), " and o ", describe(o), " must have q's dtype ", dtype_name(q.dtype()));
  const Shape lse_shape{q.dim(0), q.dim(2), q.dim(1)};
  FATHOM_CHECK(lse.shape() == lse_shape && lse.dtype() == stats_dtype(q.dtype()), "moda_attention_backward: lse ",
               describe(lse), " should be ", dtype_name(stats_dtype(q.dtype())), lse_shape.str());
  FATHOM_CHECK(d_depth_k.shape() == depth.k.shape() && d_depth_v.shape() == depth.v.shape(),
               "moda_attention_backward: depth gradient buffers must match the depth buffers ", depth.k.shape().str());
  // Several readers accumulate into the depth gradients: they are kept in the statistics dtype
  // (F32 for BF16 values, the values' own dtype otherwise).
  FATHOM_CHECK(d_depth_k.dtype() == stats_dtype(q.dtype()) && d_depth_v.dtype() == stats_dtype(q.dtype()),
               "moda_attention_backward: depth gradient buffers ", describe(d_depth_k), ", ", describe(d_depth_v),
               " must be ", dtype_name(stats_dtype(q.dtype())), " for ", dtype_name(q.dtype()), " inputs");
  if (common_device("moda_attention_backward",
                    {&grad_o, &q, &k, &v, &depth.k, &depth.v, &o, &lse, &d_depth_k, &d_depth_v})
          .is_cpu())
    return cpu::moda_attention_backward(grad_o, q, k, v, depth, o, lse, scale, d_depth_k, d_depth_v, mode);
#ifdef FATHOM_WITH_CUDA
  return cuda::moda_attention_backward(grad_o, q, k, v, depth, o, lse, scale, d_depth_k, d_depth_v, mode);
#else
  no_cuda_kernel("moda_attention_backward");
#endif
}

}  // namespace fathom
