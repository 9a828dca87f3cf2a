// CUDA DSLA decode step: T (usually 1) tokens through the step recurrence, states updated in place.
// One block per (query head, batch): thread (e, part) owns column e of the state rows of its quarter
// of the key dimensions, so each state element is read and written once per token and the output's
// sum over key dimensions is four partial sums added in a fixed order. Decoding is bound by reading
// and writing the fp32 states (2 d^2 floats per head and state per token).
#include "kernels/dsla/dsla.h"
#include "kernels/dsla/dsla_launch.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kKeyParts = 4;

template <typename T, int D, bool TWO>
__global__ void __launch_bounds__(D* kKeyParts)
    dsla_step_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     const float* __restrict__ g1, const float* __restrict__ g2, const float* __restrict__ gamma,
                     float* __restrict__ s1, float* __restrict__ s2, T* __restrict__ o, int64_t T_len, int H, int Hk) {
  __shared__ float qs[D], ks[D], vs[D], a1[D], a2[D], partial[kKeyParts][D];
  const int e = threadIdx.x % D, part = threadIdx.x / D, h = blockIdx.x, hk = h / (H / Hk);
  const int64_t b = blockIdx.y;
  const float scale = rsqrtf(float(D));
  const float w1 = TWO ? gamma[h] : 1.0f, w2 = 1.0f - w1;
  float* S1 = s1 + (b * H + h) * int64_t(D) * D;
  float* S2 = TWO ? s2 + (b * H + h) * int64_t(D) * D : nullptr;
  for (int64_t t = 0; t < T_len; ++t) {
    const int64_t qrow = ((b * T_len + t) * H + h) * int64_t(D), krow = ((b * T_len + t) * Hk + hk) * int64_t(D);
    if (part == 0) {
      qs[e] = to_float(q[qrow + e]);
      ks[e] = to_float(k[krow + e]);
      vs[e] = to_float(v[krow + e]);
      a1[e] = expf(g1[qrow + e]);
      if (TWO) a2[e] = expf(g2[qrow + e]);
    }
    __syncthreads();
    float acc = 0.0f;
    const float ve = vs[e];
    for (int c = part * (D / kKeyParts); c < (part + 1) * (D / kKeyParts); ++c) {
      const int64_t idx = int64_t(c) * D + e;
      const float kv = ks[c] * ve;
      const float x1 = a1[c] * S1[idx] + kv;
      S1[idx] = x1;
      float mixed = x1;
      if (TWO) {
        const float x2 = a2[c] * S2[idx] + kv;
        S2[idx] = x2;
        mixed = w1 * x1 + w2 * x2;
      }
      acc += qs[c] * mixed;
    }
    partial[part][e] = acc;
    __syncthreads();
    if (part == 0) {
      float sum = 0.0f;
#pragma unroll
      for (int p = 0; p < kKeyParts; ++p) sum += partial[p][e];
      o[qrow + e] = from_float<T>(scale * sum);
    }
    __syncthreads();
  }
}

}  // namespace

Tensor dsla_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g1, const Tensor& g2,
                 const Tensor& gamma, DslaState& state) {
  const bool two = g2.defined();
  Tensor o = Tensor::empty(q.shape(), q.dtype(), q.device());
  if (q.numel() == 0) return o;
  const int H = int(q.dim(2)), Hk = int(k.dim(2));
  dispatch_device_float("dsla_step", q.dtype(), [&]<typename T>() {
    dispatch_dsla_shape(q.dim(3), two, [&]<int D, bool TWO>() {
      dsla_step_kernel<T, D, TWO><<<dim3(unsigned(H), unsigned(q.dim(0))), D * kKeyParts, 0, stream_for(q.device())>>>(
          static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()), static_cast<const T*>(v.raw()),
          static_cast<const float*>(g1.raw()), TWO ? static_cast<const float*>(g2.raw()) : nullptr,
          gamma.defined() ? static_cast<const float*>(gamma.raw()) : nullptr, optional_data(state.s1),
          optional_data(state.s2), static_cast<T*>(o.raw()), q.dim(1), H, Hk);
      CUDA_CHECK_LAUNCH();
    });
  });
  return o;
}

}  // namespace fathom::cuda
