// CPU reference of the MoD routing ops: a sort per sequence for top-k, row copies for gather and
// scatter, and the routed residual and BCE written as their formulas.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/mod/mod_routing.h"

namespace fathom::cpu {

namespace {

// Whether score a at index ia ranks above b at ib: higher first, NaN above every number, lower index on ties.
bool ranks_above(float a, int64_t ia, float b, int64_t ib) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan || b_nan) return a_nan && b_nan ? ia < ib : a_nan;
  return a > b || (a == b && ia < ib);
}

void check_indices(const char* op, const Tensor& idx, int64_t seq_len) {
  const int32_t* p = idx.data<int32_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    FATHOM_CHECK(p[i] >= 0 && p[i] < seq_len, op, ": index ", p[i], " at place ", i,
                 " of idx is outside the sequence [0, ", seq_len, ")");
}

int64_t row_bytes(const Tensor& t) {
  return t.dim(0) * t.dim(1) == 0 ? 0 : int64_t(t.nbytes()) / (t.dim(0) * t.dim(1));
}

template <typename T>
T gate_of(const T* r, RouteWeight weight) {
  if (weight == RouteWeight::one) return T(1);
  return weight == RouteWeight::sigmoid ? T(1) / (T(1) + std::exp(-*r)) : *r;
}

// dg/dr at r.
template <typename T>
T gate_slope(T r, RouteWeight weight) {
  if (weight != RouteWeight::sigmoid) return T(1);
  const T s = T(1) / (T(1) + std::exp(-r));
  return s * (T(1) - s);
}

}  // namespace

Tensor topk_per_sequence(const Tensor& scores, int64_t k) {
  const int64_t B = scores.dim(0), S = scores.dim(1);
  const float* r = scores.data<float>();
  std::vector<int32_t> out(size_t(B * k));
  std::vector<int64_t> order(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b) {
    const float* row = r + b * S;
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + (k - 1), order.end(),
                     [&](int64_t i, int64_t j) { return ranks_above(row[i], i, row[j], j); });
    std::sort(order.begin(), order.begin() + k);
    for (int64_t j = 0; j < k; ++j) out[size_t(b * k + j)] = int32_t(order[size_t(j)]);
  }
  return Tensor::from_vector(out, {B, k});
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  check_indices("gather_rows", idx, x.dim(1));
  const int64_t B = x.dim(0), S = x.dim(1), k = idx.dim(1), bytes = row_bytes(x);
  std::vector<int64_t> dims = x.shape().vec();
  dims[1] = k;
  Tensor rows = Tensor::empty(Shape(dims), x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(rows.raw());
  const int32_t* id = idx.data<int32_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(dst + (b * k + j) * bytes, src + (b * S + id[b * k + j]) * bytes, size_t(bytes));
  return rows;
}

Tensor scatter_rows(const Tensor& rows, const Tensor& idx, int64_t seq_len) {
  check_indices("scatter_rows", idx, seq_len);
  const int64_t B = rows.dim(0), k = rows.dim(1), bytes = row_bytes(rows);
  std::vector<int64_t> dims = rows.shape().vec();
  dims[1] = seq_len;
  Tensor out = Tensor::zeros(Shape(dims), rows.dtype());
  const char* src = static_cast<const char*>(rows.raw());
  char* dst = static_cast<char*>(out.raw());
  const int32_t* id = idx.data<int32_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(dst + (b * seq_len + id[b * k + j]) * bytes, src + (b * k + j) * bytes, size_t(bytes));
  return out;
}

Tensor routed_mix_forward(const Tensor& x, const Tensor& y, const Tensor& r, const Tensor& idx, RouteWeight weight) {
  check_indices("routed_mix", idx, x.dim(1));
  const int64_t B = x.dim(0), S = x.dim(1), k = idx.dim(1), d = x.numel() / (B * S);
  Tensor out = x.clone();
  dispatch_float("routed_mix", x.dtype(), [&]<typename T>() {
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    const T* rp = weight == RouteWeight::one ? nullptr : r.data<T>();
    T* o = out.data<T>();
    const int32_t* id = idx.data<int32_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t i = b * S + id[b * k + j];
        const T w = gate_of(rp ? rp + i : nullptr, weight);
        for (int64_t c = 0; c < d; ++c) o[i * d + c] = (T(1) - w) * xp[i * d + c] + w * yp[(b * k + j) * d + c];
      }
  });
  return out;
}

RoutedMixGrads routed_mix_backward(const Tensor& grad_out, const Tensor& x, const Tensor& y, const Tensor& r,
                                   const Tensor& idx, RouteWeight weight) {
  check_indices("routed_mix_backward", idx, x.dim(1));
  const int64_t B = x.dim(0), S = x.dim(1), k = idx.dim(1), d = x.numel() / (B * S);
  RoutedMixGrads grads{grad_out.clone(), Tensor::empty(y.shape(), y.dtype()), Tensor()};
  if (weight != RouteWeight::one) grads.dr = Tensor::zeros(r.shape(), r.dtype());
  dispatch_float("routed_mix_backward", x.dtype(), [&]<typename T>() {
    const T* g = grad_out.data<T>();
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    const T* rp = weight == RouteWeight::one ? nullptr : r.data<T>();
    T* dx = grads.dx.data<T>();
    T* dy = grads.dy.data<T>();
    T* dr = grads.dr.defined() ? grads.dr.data<T>() : nullptr;
    const int32_t* id = idx.data<int32_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t i = b * S + id[b * k + j], row = b * k + j;
        const T w = gate_of(rp ? rp + i : nullptr, weight);
        double dot = 0;  // <grad_out, y - x>: the delta's gradient
        for (int64_t c = 0; c < d; ++c) {
          const T gc = g[i * d + c];
          dot += double(gc) * (double(yp[row * d + c]) - double(xp[i * d + c]));
          dx[i * d + c] = (T(1) - w) * gc;
          dy[row * d + c] = w * gc;
        }
        if (dr) dr[i] = T(dot) * gate_slope(rp[i], weight);
      }
  });
  return grads;
}

Tensor routing_bce_forward(const Tensor& logits, const Tensor& targets) {
  Tensor loss = Tensor::empty(Shape{}, logits.dtype());
  dispatch_float("routing_bce", logits.dtype(), [&]<typename T>() {
    const T* l = logits.data<T>();
    const T* t = targets.data<T>();
    double sum = 0;
    for (int64_t i = 0; i < logits.numel(); ++i) {
      const double li = double(l[i]);
      sum += std::max(li, 0.0) - li * double(t[i]) + std::log1p(std::exp(-std::abs(li)));
    }
    loss.data<T>()[0] = T(sum / double(logits.numel()));
  });
  return loss;
}

Tensor routing_bce_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets) {
  Tensor dl = Tensor::empty(logits.shape(), logits.dtype());
  dispatch_float("routing_bce_backward", logits.dtype(), [&]<typename T>() {
    const T* l = logits.data<T>();
    const T* t = targets.data<T>();
    T* out = dl.data<T>();
    const double scale = grad_loss.item() / double(logits.numel());
    for (int64_t i = 0; i < logits.numel(); ++i) {
      // sigmoid(l) - t without cancellation for confident right predictions (as the CUDA kernel).
      const double li = double(l[i]), ti = double(t[i]);
      out[i] = T(scale * ((1.0 - ti) / (1.0 + std::exp(-li)) - ti / (1.0 + std::exp(li))));
    }
  });
  return dl;
}

}  // namespace fathom::cpu
