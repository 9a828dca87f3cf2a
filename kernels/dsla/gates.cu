// CUDA gates of DSLA: the log forget gates are one elementwise pass each way (f32 math, f32 output
// whatever z's dtype); the mixing weight is a handful of values, one small block.
#include "kernels/dsla/gates.h"
#include "kernels/runtime/elementwise_map.cuh"
#include "kernels/runtime/float_dispatch.h"

namespace fathom::cuda {

namespace {

constexpr int kPack = 4;

// logsigmoid(u) = -log(1 + exp(-u)), without overflow for either sign of u.
__device__ __forceinline__ float log_sigmoid(float u) { return fminf(u, 0.0f) - log1pf(expf(-fabsf(u))); }

template <typename T>
struct LogSigmoidGateOp {
  const T* z;
  const float* bias;
  float* g;
  int64_t n;
  float scale;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<T, N> zp = load_pack<N>(z + i);
    Pack<float, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = scale * log_sigmoid(to_float(zp.v[k]) + bias[(i + k) % n]);
    store_pack<N>(g + i, out);
  }
};

struct LogSigmoidGateBackwardOp {
  const float* grad_g;
  const float* g;
  float* du;
  float scale;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<float, N> dg = load_pack<N>(grad_g + i), gp = load_pack<N>(g + i);
    Pack<float, N> out;
    // sigmoid(-u) = -expm1(g / scale): exact also where the gate is near 1.
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = dg.v[k] * -scale * expm1f(gp.v[k] / scale);
    store_pack<N>(du + i, out);
  }
};

__global__ void sigmoid_expand_kernel(const float* logits, int64_t group, int64_t n, float* y) {
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = 1.0f / (1.0f + expf(-logits[i / group]));
}

// One thread per logit, summing its outputs in order (deterministic).
__global__ void sigmoid_expand_backward_kernel(const float* grad_y, const float* y, int64_t group, int64_t m,
                                               float* dlogits) {
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = i * group; j < (i + 1) * group; ++j) sum += grad_y[j] * y[j] * (1.0f - y[j]);
    dlogits[i] = sum;
  }
}

void check_f32(const char* op, const Tensor& t) {
  FATHOM_CHECK(t.dtype() == DType::f32, op, ": the CUDA kernel computes in F32, got ", describe(t));
}

}  // namespace

Tensor log_sigmoid_gate_forward(const Tensor& z, const Tensor& bias, double scale) {
  Tensor g = Tensor::empty(z.shape(), DType::f32, z.device());
  cudaStream_t stream = stream_for(z.device());
  dispatch_device_float("log_sigmoid_gate", z.dtype(), [&]<typename T>() {
    const LogSigmoidGateOp<T> op{static_cast<const T*>(z.raw()), static_cast<const float*>(bias.raw()),
                                 static_cast<float*>(g.raw()), bias.numel(), float(scale)};
    run_map<kPack>(z.numel(), all_aligned(kPack * sizeof(float), op.g) && all_aligned(kPack * sizeof(T), op.z), op,
                   stream);
  });
  return g;
}

Tensor log_sigmoid_gate_backward(const Tensor& grad_g, const Tensor& g, double scale) {
  check_f32("log_sigmoid_gate_backward", g);
  Tensor du = Tensor::empty(g.shape(), DType::f32, g.device());
  const LogSigmoidGateBackwardOp op{static_cast<const float*>(grad_g.raw()), static_cast<const float*>(g.raw()),
                                    static_cast<float*>(du.raw()), float(scale)};
  run_map<kPack>(g.numel(), all_aligned(kPack * sizeof(float), op.grad_g, op.g, op.du), op, stream_for(g.device()));
  return du;
}

Tensor sigmoid_expand_forward(const Tensor& logits, int64_t n) {
  check_f32("sigmoid_expand", logits);
  Tensor y = Tensor::empty({n}, DType::f32, logits.device());
  sigmoid_expand_kernel<<<1, 256, 0, stream_for(logits.device())>>>(
      static_cast<const float*>(logits.raw()), n / logits.numel(), n, static_cast<float*>(y.raw()));
  CUDA_CHECK_LAUNCH();
  return y;
}

Tensor sigmoid_expand_backward(const Tensor& grad_y, const Tensor& y, int64_t m) {
  check_f32("sigmoid_expand_backward", y);
  Tensor dlogits = Tensor::empty({m}, DType::f32, y.device());
  sigmoid_expand_backward_kernel<<<1, 256, 0, stream_for(y.device())>>>(
      static_cast<const float*>(grad_y.raw()), static_cast<const float*>(y.raw()), y.numel() / m, m,
      static_cast<float*>(dlogits.raw()));
  CUDA_CHECK_LAUNCH();
  return dlogits;
}

}  // namespace fathom::cuda
