#include "kernels/moda/moda_attention.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_slot_range(const char* op, const Tensor& buffer, int64_t begin, int64_t end) {
  FATHOM_CHECK(0 <= begin && begin <= end && end <= buffer.dim(2), op, ": slot range [", begin, ", ", end,
               ") outside the buffer's ", buffer.dim(2), " slots");
}
void check_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth) {
  FATHOM_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, op, ": q, k, v must be [B, T, H, d], got ", describe(q),
               ", ", describe(k), ", ", describe(v));
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
  FATHOM_CHECK(slot >= 0 && slot < buffer.dim(2), op, ": slot ", slot, " outside the buffer's ", buffer.dim(2),
               " slots");
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
  return on_device("write_depth_slot", common_device("write_depth_slot", {&buffer, &x}),
                   FATHOM_KERNEL(write_depth_slot), buffer, slot, x);
}

Tensor read_depth_slot(const Tensor& buffer, int64_t slot) { return read_depth_slot(buffer, slot, buffer.dtype()); }

Tensor read_depth_slot(const Tensor& buffer, int64_t slot, DType dtype) {
  const Shape& b = buffer.shape();
  check_slot("read_depth_slot", buffer, slot, buffer.rank() == 5 ? Shape({b[0], b[1], b[3], b[4]}) : Shape());
  return on_device("read_depth_slot", buffer.device(), FATHOM_KERNEL(read_depth_slot), buffer, slot, dtype);
}

void zero_depth_slots(Tensor& buffer, int64_t begin, int64_t end) {
  FATHOM_CHECK(buffer.rank() == 5, "zero_depth_slots: a depth buffer is [B, T, S, Hk, d], got ", describe(buffer));
  check_slot_range("zero_depth_slots", buffer, begin, end);
  return on_device("zero_depth_slots", buffer.device(), FATHOM_KERNEL(zero_depth_slots), buffer, begin, end);
}

AttentionOutput moda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const DepthSlots& depth,
                                       double scale) {
  check_shapes("moda_attention", q, k, v, depth);
  return on_device("moda_attention", common_device("moda_attention", {&q, &k, &v, &depth.k, &depth.v}),
                   FATHOM_KERNEL(moda_attention_forward), q, k, v, depth, scale);
}

namespace {
void check_backward_inputs(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                           const DepthSlots& depth, const Tensor& o, const Tensor& lse) {
  check_shapes("moda_attention_backward", q, k, v, depth);
  FATHOM_CHECK(grad_o.shape() == q.shape() && o.shape() == q.shape(),
               "moda_attention_backward: grad_o and o must have q's shape ", q.shape().str());
  FATHOM_CHECK(grad_o.dtype() == q.dtype() && o.dtype() == q.dtype(), "moda_attention_backward: grad_o ",
               describe(grad_o), " and o ", describe(o), " must have q's dtype ", dtype_name(q.dtype()));
  const Shape lse_shape{q.dim(0), q.dim(2), q.dim(1)};
  FATHOM_CHECK(lse.shape() == lse_shape && lse.dtype() == stats_dtype(q.dtype()), "moda_attention_backward: lse ",
               describe(lse), " should be ", dtype_name(stats_dtype(q.dtype())), lse_shape.str());
}
}  // namespace

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       Tensor& d_depth_k, Tensor& d_depth_v, DepthGradMode mode) {
  check_backward_inputs(grad_o, q, k, v, depth, o, lse);
  FATHOM_CHECK(d_depth_k.shape() == depth.k.shape() && d_depth_v.shape() == depth.v.shape(),
               "moda_attention_backward: depth gradient buffers must match the depth buffers ", depth.k.shape().str());
  // Several readers accumulate into the depth gradients: they are kept in the statistics dtype
  // (F32 for BF16 values, the values' own dtype otherwise).
  FATHOM_CHECK(d_depth_k.dtype() == stats_dtype(q.dtype()) && d_depth_v.dtype() == stats_dtype(q.dtype()),
               "moda_attention_backward: depth gradient buffers ", describe(d_depth_k), ", ", describe(d_depth_v),
               " must be ", dtype_name(stats_dtype(q.dtype())), " for ", dtype_name(q.dtype()), " inputs");
  const Device device = common_device("moda_attention_backward",
                                      {&grad_o, &q, &k, &v, &depth.k, &depth.v, &o, &lse, &d_depth_k, &d_depth_v});
  return on_device<ModaAttentionBackwardKernel>("moda_attention_backward", device,
                                                FATHOM_KERNEL(moda_attention_backward), grad_o, q, k, v, depth, o, lse,
                                                scale, d_depth_k, d_depth_v, mode);
}

bool moda_depth_weights_supported(const Tensor& q, const Tensor& k) {
  return on_device("moda_depth_weights_supported", q.device(), FATHOM_KERNEL(moda_depth_weights_supported), q, k);
}

AttentionGrads moda_attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const DepthSlots& depth, const Tensor& o, const Tensor& lse, double scale,
                                       DepthWeights& weights) {
  check_backward_inputs(grad_o, q, k, v, depth, o, lse);
  const Device device = common_device("moda_attention_backward", {&grad_o, &q, &k, &v, &depth.k, &depth.v, &o, &lse});
  FATHOM_CHECK(moda_depth_weights_supported(q, k), "moda_attention_backward: depth weights need the group kernel's ",
               "folded tiles (G <= 16) on CUDA, got G = ", q.dim(2) / k.dim(2));
  const Shape shape{q.dim(0), q.dim(1), q.dim(2), depth.end - depth.begin};
  weights = {Tensor::empty(shape, stats_dtype(q.dtype()), device),
             Tensor::empty(shape, stats_dtype(q.dtype()), device)};
  return on_device<ModaAttentionBackwardWeightsKernel>("moda_attention_backward", device,
                                                       FATHOM_KERNEL(moda_attention_backward), grad_o, q, k, v, depth,
                                                       o, lse, scale, weights);
}

std::vector<SlotGrads> depth_slot_grads(const std::vector<const DepthReader*>& readers, int64_t first, int64_t last,
                                        int64_t kv_heads, DType dtype) {
  const char* op = "depth_slot_grads";
  FATHOM_CHECK(!readers.empty(), op, ": no readers");
  FATHOM_CHECK(first <= last, op, ": slot range [", first, ", ", last, ") is empty or reversed");
  const Tensor& q0 = readers.front()->q;
  FATHOM_CHECK(q0.rank() == 4 && kv_heads > 0 && q0.dim(2) % kv_heads == 0, op, ": q ", describe(q0),
               " is not [B, T, Hq, d] with Hq a multiple of ", kv_heads, " KV heads");
  std::vector<const Tensor*> tensors;
  for (const DepthReader* r : readers) {
    FATHOM_CHECK(r->q.shape() == q0.shape() && r->grad_o.shape() == q0.shape() && r->q.dtype() == q0.dtype() &&
                     r->grad_o.dtype() == q0.dtype(),
                 op, ": every reader's q and dO must be ", describe(q0), ", got ", describe(r->q), " and ",
                 describe(r->grad_o));
    const Shape w{q0.dim(0), q0.dim(1), q0.dim(2), r->end - r->begin};
    for (const Tensor* t : {&r->weights.p, &r->weights.ds})
      FATHOM_CHECK(t->shape() == w && t->dtype() == stats_dtype(q0.dtype()), op, ": weights ", describe(*t),
                   " should be ", dtype_name(stats_dtype(q0.dtype())), w.str(), " for slots [", r->begin, ", ", r->end,
                   ")");
    tensors.insert(tensors.end(), {&r->q, &r->grad_o, &r->weights.p, &r->weights.ds});
  }
  return on_device(op, common_device(op, tensors), FATHOM_KERNEL(depth_slot_grads), readers, first, last, kv_heads,
                   dtype);
}

}  // namespace fathom
