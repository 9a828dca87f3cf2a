// CPU reference of DSLA's gates: plain loops, one element at a time.
#include <algorithm>
#include <cmath>

#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/dsla/gates.h"

namespace fathom::cpu {

namespace {
// logsigmoid(u) = -log(1 + exp(-u)), without overflow for either sign of u.
template <typename T>
T log_sigmoid(T u) {
  return std::min(u, T(0)) - std::log1p(std::exp(-std::abs(u)));
}
}  // namespace

Tensor log_sigmoid_gate_forward(const Tensor& z, const Tensor& bias, double scale) {
  Tensor g = Tensor::empty(z.shape(), z.dtype());
  dispatch_float("log_sigmoid_gate", z.dtype(), [&]<typename T>() {
    const T* zp = z.data<T>();
    const T* b = bias.data<T>();
    T* out = g.data<T>();
    const int64_t n = bias.numel(), total = z.numel();
#pragma omp parallel for schedule(static) if (total > kMinParallelWork)
    for (int64_t i = 0; i < total; ++i) out[i] = T(scale) * log_sigmoid(zp[i] + b[i % n]);
  });
  return g;
}

Tensor log_sigmoid_gate_backward(const Tensor& grad_g, const Tensor& g, double scale) {
  Tensor du = Tensor::empty(g.shape(), g.dtype());
  dispatch_float("log_sigmoid_gate_backward", g.dtype(), [&]<typename T>() {
    const T* dg = grad_g.data<T>();
    const T* gp = g.data<T>();
    T* out = du.data<T>();
    const int64_t total = g.numel();
    // sigmoid(-u) = 1 - exp(logsigmoid(u)) = -expm1(g / scale), exact also where the gate is near 1.
#pragma omp parallel for schedule(static) if (total > kMinParallelWork)
    for (int64_t i = 0; i < total; ++i) out[i] = dg[i] * T(-scale) * std::expm1(gp[i] / T(scale));
  });
  return du;
}

Tensor sigmoid_expand_forward(const Tensor& logits, int64_t n) {
  Tensor y = Tensor::empty({n}, logits.dtype());
  dispatch_float("sigmoid_expand", logits.dtype(), [&]<typename T>() {
    const T* c = logits.data<T>();
    T* out = y.data<T>();
    const int64_t group = n / logits.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = T(1) / (T(1) + std::exp(-c[i / group]));
  });
  return y;
}

Tensor sigmoid_expand_backward(const Tensor& grad_y, const Tensor& y, int64_t m) {
  Tensor dc = Tensor::empty({m}, y.dtype());
  dispatch_float("sigmoid_expand_backward", y.dtype(), [&]<typename T>() {
    const T* dy = grad_y.data<T>();
    const T* yp = y.data<T>();
    T* out = dc.data<T>();
    const int64_t group = y.numel() / m;
    for (int64_t i = 0; i < m; ++i) {
      T sum = 0;
      for (int64_t j = i * group; j < (i + 1) * group; ++j) sum += dy[j] * yp[j] * (T(1) - yp[j]);
      out[i] = sum;
    }
  });
  return dc;
}

}  // namespace fathom::cpu
