// CPU SwiGLU over chunks of elements with Eigen array expressions, so exp runs in SIMD.
#include <algorithm>

#include "kernels/cpu_support/eigen_maps.h"
#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/swiglu/swiglu.h"

namespace fathom::cpu {

namespace {
constexpr int64_t kChunk = 4096;

// Calls f(begin, count) over [0, n) in chunks, in parallel when n is large.
template <typename F>
void for_chunks(int64_t n, F&& f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(kChunk, n - c * kChunk));
}
}  // namespace

Tensor swiglu_forward(const Tensor& gate, const Tensor& up) {
  Tensor y = Tensor::empty(gate.shape(), gate.dtype());
  dispatch_float("swiglu", gate.dtype(), [&]<typename T>() {
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    T* out = y.data<T>();
    for_chunks(gate.numel(), [&](int64_t begin, int64_t count) {
      const ConstArrayView<T> gc(g + begin, count), uc(u + begin, count);
      ArrayView<T>(out + begin, count) = gc / (T(1) + (-gc).exp()) * uc;
    });
  });
  return y;
}

SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up) {
  SwigluGrads grads{Tensor::empty(gate.shape(), gate.dtype()), Tensor::empty(up.shape(), up.dtype())};
  dispatch_float("swiglu_backward", gate.dtype(), [&]<typename T>() {
    const T* dy = grad_y.data<T>();
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    T* dg = grads.dgate.data<T>();
    T* du = grads.dup.data<T>();
    for_chunks(gate.numel(), [&](int64_t begin, int64_t count) {
      const ConstArrayView<T> dyc(dy + begin, count), gc(g + begin, count), uc(u + begin, count);
      const Eigen::Array<T, Eigen::Dynamic, 1> sig = T(1) / (T(1) + (-gc).exp());
      // d silu(g)/dg = sig * (1 + g * (1 - sig))
      ArrayView<T>(dg + begin, count) = dyc * uc * sig * (T(1) + gc * (T(1) - sig));
      ArrayView<T>(du + begin, count) = dyc * gc * sig;
    });
  });
  return grads;
}

Tensor silu_forward(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("silu", x.dtype(), [&]<typename T>() {
    const T* xp = x.data<T>();
    T* out = y.data<T>();
    for_chunks(x.numel(), [&](int64_t begin, int64_t count) {
      const ConstArrayView<T> xc(xp + begin, count);
      ArrayView<T>(out + begin, count) = xc / (T(1) + (-xc).exp());
    });
  });
  return y;
}

Tensor silu_backward(const Tensor& grad_y, const Tensor& x) {
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("silu_backward", x.dtype(), [&]<typename T>() {
    const T* dy = grad_y.data<T>();
    const T* xp = x.data<T>();
    T* out = dx.data<T>();
    for_chunks(x.numel(), [&](int64_t begin, int64_t count) {
      const ConstArrayView<T> dyc(dy + begin, count), xc(xp + begin, count);
      const Eigen::Array<T, Eigen::Dynamic, 1> sig = T(1) / (T(1) + (-xc).exp());
      ArrayView<T>(out + begin, count) = dyc * sig * (T(1) + xc * (T(1) - sig));
    });
  });
  return dx;
}

}  // namespace fathom::cpu
