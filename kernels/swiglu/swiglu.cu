// CUDA SwiGLU: one fused elementwise pass forward (y = silu(gate) * up) and backward (both grads).
#include "kernels/runtime/elementwise_map.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/swiglu/swiglu.h"

namespace fathom::cuda {

namespace {

constexpr int kPack = 4;

template <typename T>
struct SwigluForwardOp {
  const T* gate;
  const T* up;
  T* y;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<T, N> g = load_pack<N>(gate + i), u = load_pack<N>(up + i);
    Pack<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = from_float<T>(swiglu_value(to_float(g.v[k]), to_float(u.v[k])));
    store_pack<N>(y + i, out);
  }
};

template <typename T>
struct SwigluBackwardOp {
  const T* grad_y;
  const T* gate;
  const T* up;
  T* dgate;
  T* dup;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<T, N> dy = load_pack<N>(grad_y + i), g = load_pack<N>(gate + i), u = load_pack<N>(up + i);
    Pack<T, N> dg, du;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float gk = to_float(g.v[k]), dyk = to_float(dy.v[k]), s = sigmoid(gk);
      // d silu(g)/dg = s (1 + g (1 - s))
      dg.v[k] = from_float<T>(dyk * to_float(u.v[k]) * s * (1.0f + gk * (1.0f - s)));
      du.v[k] = from_float<T>(dyk * gk * s);
    }
    store_pack<N>(dgate + i, dg);
    store_pack<N>(dup + i, du);
  }
};

template <typename T>
struct SiluForwardOp {
  const T* x;
  T* y;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<T, N> in = load_pack<N>(x + i);
    Pack<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float xk = to_float(in.v[k]);
      out.v[k] = from_float<T>(xk * sigmoid(xk));
    }
    store_pack<N>(y + i, out);
  }
};

template <typename T>
struct SiluBackwardOp {
  const T* grad_y;
  const T* x;
  T* dx;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<T, N> dy = load_pack<N>(grad_y + i), in = load_pack<N>(x + i);
    Pack<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float xk = to_float(in.v[k]), s = sigmoid(xk);
      out.v[k] = from_float<T>(to_float(dy.v[k]) * s * (1.0f + xk * (1.0f - s)));
    }
    store_pack<N>(dx + i, out);
  }
};

}  // namespace

Tensor swiglu_forward(const Tensor& gate, const Tensor& up) {
  Tensor y = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  cudaStream_t stream = stream_for(gate.device());
  dispatch_device_float("swiglu", gate.dtype(), [&]<typename T>() {
    const SwigluForwardOp<T> op{static_cast<const T*>(gate.raw()), static_cast<const T*>(up.raw()),
                                static_cast<T*>(y.raw())};
    run_map<kPack>(gate.numel(), all_aligned(kPack * sizeof(T), op.gate, op.up, op.y), op, stream);
  });
  return y;
}

SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up) {
  SwigluGrads grads{Tensor::empty(gate.shape(), gate.dtype(), gate.device()),
                    Tensor::empty(up.shape(), up.dtype(), up.device())};
  cudaStream_t stream = stream_for(gate.device());
  dispatch_device_float("swiglu_backward", gate.dtype(), [&]<typename T>() {
    const SwigluBackwardOp<T> op{static_cast<const T*>(grad_y.raw()), static_cast<const T*>(gate.raw()),
                                 static_cast<const T*>(up.raw()), static_cast<T*>(grads.dgate.raw()),
                                 static_cast<T*>(grads.dup.raw())};
    run_map<kPack>(gate.numel(), all_aligned(kPack * sizeof(T), op.grad_y, op.gate, op.up, op.dgate, op.dup), op,
                   stream);
  });
  return grads;
}

Tensor silu_forward(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_device_float("silu", x.dtype(), [&]<typename T>() {
    const SiluForwardOp<T> op{static_cast<const T*>(x.raw()), static_cast<T*>(y.raw())};
    run_map<kPack>(x.numel(), all_aligned(kPack * sizeof(T), op.x, op.y), op, stream_for(x.device()));
  });
  return y;
}

Tensor silu_backward(const Tensor& grad_y, const Tensor& x) {
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_device_float("silu_backward", x.dtype(), [&]<typename T>() {
    const SiluBackwardOp<T> op{static_cast<const T*>(grad_y.raw()), static_cast<const T*>(x.raw()),
                               static_cast<T*>(dx.raw())};
    run_map<kPack>(x.numel(), all_aligned(kPack * sizeof(T), op.grad_y, op.x, op.dx), op, stream_for(x.device()));
  });
  return dx;
}

}  // namespace fathom::cuda
