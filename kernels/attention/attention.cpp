#include "kernels/attention/attention.h"

#include <cmath>
#include <vector>

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  FATHOM_CHECK(q.defined() && k.defined() && v.defined(), op, ": undefined input");
  FATHOM_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, op, ": q, k, v must be [B, T, H, d], got q ",
               describe(q), ", k ", describe(k), ", v ", describe(v));
  FATHOM_CHECK(k.shape() == v.shape(), op, ": k ", describe(k), " and v ", describe(v), " differ in shape");
  FATHOM_CHECK(q.dim(0) == k.dim(0) && q.dim(1) == k.dim(1) && q.dim(3) == k.dim(3), op, ": q ", describe(q), " and k ",
               describe(k), " disagree on batch, sequence length or head dim");
  FATHOM_CHECK(k.dim(2) > 0 && q.dim(2) % k.dim(2) == 0, op, ": query heads Hq = ", q.dim(2),
               " must be a multiple of KV heads Hk = ", k.dim(2));
  FATHOM_CHECK(q.dim(3) > 0, op, ": head dim must be positive, got ", describe(q));
  FATHOM_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": dtypes differ: q ", describe(q), ", k ",
               describe(k), ", v ", describe(v));
  FATHOM_CHECK(std::isfinite(scale) && scale != 0, op, ": scale must be finite and non-zero, got ", scale);
}
}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  check_qkv("attention", q, k, v, scale);
  return on_device("attention", common_device("attention", {&q, &k, &v}), FATHOM_KERNEL(attention_forward), q, k, v,
                   scale);
}

AttentionGrads attention_backward(const Tensor& grad_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& o, const Tensor& lse, double scale) {
  check_qkv("attention_backward", q, k, v, scale);
  FATHOM_CHECK(grad_o.defined() && grad_o.shape() == q.shape() && grad_o.dtype() == q.dtype(),
               "attention_backward: grad_o ", describe(grad_o), " does not match q ", describe(q));
  FATHOM_CHECK(o.defined() && o.shape() == q.shape() && o.dtype() == q.dtype(), "attention_backward: o ", describe(o),
               " does not match q ", describe(q));
  const Shape lse_shape{q.dim(0), q.dim(2), q.dim(1)};
  FATHOM_CHECK(lse.defined() && lse.shape() == lse_shape && lse.dtype() == stats_dtype(q.dtype()),
               "attention_backward: lse ", describe(lse), " should be ", dtype_name(q.dtype()), lse_shape.str());
  return on_device("attention_backward", common_device("attention_backward", {&grad_o, &q, &k, &v, &o, &lse}),
                   FATHOM_KERNEL(attention_backward), grad_o, q, k, v, o, lse, scale);
}

double attention_entropy(const Tensor& q, const Tensor& k, double scale) {
  const AttentionOutput weighted_keys = attention_forward(q, k, k, scale);
  const int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), d = q.dim(3);
  const std::vector<float> qs = q.to(DType::f32).to(Device::cpu()).to_vector<float>();
  const std::vector<float> ks = weighted_keys.o.to(DType::f32).to(Device::cpu()).to_vector<float>();
  const std::vector<float> lse = weighted_keys.lse.to(DType::f32).to(Device::cpu()).to_vector<float>();
  double total = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        const size_t row = size_t(((b * T + t) * Hq + h) * d);
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double(qs[row + size_t(i)]) * double(ks[row + size_t(i)]);
        total += double(lse[size_t((b * Hq + h) * T + t)]) - scale * dot;
      }
  return total / double(B * T * Hq);
}

}  // namespace fathom
