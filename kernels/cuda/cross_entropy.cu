// CUDA cross-entropy with z-loss. Forward: one block per row reads the logits once (bf16 or f32,
// never widened in memory), keeping a running max and rescaled sum in f32 registers (online softmax,
// base 2), and writes the row's lse and loss terms; one block then sums the rows in a fixed order in
// f64. Backward: one block per row reads the logits once more and writes
// dlogits = softmax * g (1 + 2 w lse) - g [j = target], out of place or over the logits themselves.
#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/device_errors.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/float_dispatch.h"
#include "kernels/cuda/runtime.h"
#include "kernels/dispatch.h"

namespace fathom::cuda {

namespace {

constexpr int kRowThreads = 512;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A counted row's target, or -1 for an ignored row; a bad target is reported and the row ignored.
template <typename I>
__device__ __forceinline__ int64_t checked_target(const I* targets, int64_t row, int64_t vocab, int64_t ignore_index,
                                                  DeviceErrorRecord* errors) {
  const int64_t t = int64_t(targets[row]);
  if (t == ignore_index) return -1;
  if (t < 0 || t >= vocab) {
    report_device_error(errors, kCrossEntropyTargetOutOfRange, t, row, vocab);
    return -1;
  }
  return t;
}

struct RunningSum {  // sum of 2^(y - m), y = x log2(e)
  float m = -INFINITY;
  float s = 0;
  // A pack at a time: one rescale at most, then one exp2 per value, no per-element branch.
  template <int N>
  __device__ void add(const float (&x)[N]) {
    float y[N];
    float top = -INFINITY;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      y[k] = x[k] * kLog2e;
      top = fmaxf(top, y[k]);
    }
    if (top > m) {
      s *= exp2f(m - top);
      m = top;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) s += exp2f(y[k] - m);
  }
  __device__ void merge(float m2, float s2) {
    const float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return;
    s = s * exp2f(m - mm) + s2 * exp2f(m2 - mm);
    m = mm;
  }
};

template <typename T, typename I>
__global__ void cross_entropy_rows_kernel(const T* logits, const I* targets, int64_t vocab, int64_t ignore_index,
                                          float* lse_out, double* row_terms, DeviceErrorRecord* errors) {
  __shared__ float shared_m[32], shared_s[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  RunningSum acc;
  for_each_pack_in_row(x, vocab, [&](const auto& values, int64_t) { acc.add(values); });
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    acc.merge(__shfl_xor_sync(0xffffffffu, acc.m, offset), __shfl_xor_sync(0xffffffffu, acc.s, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    shared_m[warp] = acc.m;
    shared_s[warp] = acc.s;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  RunningSum total;
  for (int w = 0; w < int(blockDim.x / 32); ++w) total.merge(shared_m[w], shared_s[w]);  // fixed order
  const float lse = (total.m + log2f(total.s)) * kLn2;
  lse_out[row] = lse;
  const int64_t t = checked_target(targets, row, vocab, ignore_index, errors);
  row_terms[2 * row] = t < 0 ? 0.0 : double(lse) - double(to_float(x[t]));
  row_terms[2 * row + 1] = t < 0 ? 0.0 : double(lse) * double(lse);
}

// sums = {ce sum, z sum, counted}; loss = (ce + w z) / counted, or 0 with no counted row.
template <typename I>
__global__ void cross_entropy_total_kernel(const double* row_terms, const I* targets, int64_t rows, int64_t vocab,
                                           int64_t ignore_index, double z_loss_weight, double* sums, float* loss) {
  __shared__ double scratch[32];
  double ce = 0, z = 0, counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = int64_t(targets[r]);
    if (t == ignore_index || t < 0 || t >= vocab) continue;
    ce += row_terms[2 * r];
    z += row_terms[2 * r + 1];
    counted += 1;
  }
  ce = block_sum(ce, scratch);
  z = block_sum(z, scratch);
  counted = block_sum(counted, scratch);
  if (threadIdx.x == 0) {
    sums[0] = ce;
    sums[1] = z;
    sums[2] = counted;
    *loss = counted > 0 ? float(ce / counted + z_loss_weight * z / counted) : 0.0f;
  }
}

// scale = grad_loss / counted (0 with no counted row); reports bad targets.
template <typename I>
__global__ void cross_entropy_scale_kernel(const I* targets, int64_t rows, int64_t vocab, int64_t ignore_index,
                                           const float* grad_loss, float* scale, DeviceErrorRecord* errors) {
  __shared__ double scratch[32];
  double counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    counted += checked_target(targets, r, vocab, ignore_index, errors) >= 0 ? 1.0 : 0.0;
  counted = block_sum(counted, scratch);
  if (threadIdx.x == 0) *scale = counted > 0 ? float(double(*grad_loss) / counted) : 0.0f;
}

template <typename T, typename I>
__global__ void cross_entropy_backward_kernel(const T* logits, T* grad, const I* targets, const float* lse,
                                              const float* scale, int64_t vocab, int64_t ignore_index,
                                              float z_loss_weight) {
  const int64_t row = blockIdx.x;
  const int64_t t0 = int64_t(targets[row]);
  const bool counted = t0 != ignore_index && t0 >= 0 && t0 < vocab;
  const float g = counted ? *scale : 0.0f;
  const float l2 = lse[row] * kLog2e;
  const float coef = g * (1.0f + 2.0f * z_loss_weight * lse[row]);
  const int64_t t = counted ? t0 : -1;
  transform_row(logits + row * vocab, grad + row * vocab, vocab, [&](float v, int64_t j) {
    const float p = exp2f(v * kLog2e - l2) * coef;
    return j == t ? p - g : p;
  });
}

}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                         int64_t ignore_index) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  CrossEntropyOutput out;
  out.lse = Tensor::empty({N}, DType::f32, logits.device());
  out.loss = Tensor::empty(Shape{}, DType::f32, logits.device());
  if (N == 0) {
    out.loss.zero_();
    return out;
  }
  cudaStream_t stream = stream_for(logits.device());
  Tensor row_terms = Tensor::empty({N, 2}, DType::f64, logits.device());
  Tensor sums = Tensor::empty({3}, DType::f64, logits.device());
  dispatch_device_float("cross_entropy", logits.dtype(), [&]<typename T>() {
    dispatch_index("cross_entropy", "targets", targets.dtype(), [&]<typename I>() {
      const I* tp = static_cast<const I*>(targets.raw());
      cross_entropy_rows_kernel<T, I><<<unsigned(N), kRowThreads, 0, stream>>>(
          static_cast<const T*>(logits.raw()), tp, V, ignore_index, static_cast<float*>(out.lse.raw()),
          static_cast<double*>(row_terms.raw()), device_error_record());
      CUDA_CHECK_LAUNCH();
      cross_entropy_total_kernel<I><<<1, 1024, 0, stream>>>(static_cast<const double*>(row_terms.raw()), tp, N, V,
                                                           ignore_index, z_loss_weight,
                                                           static_cast<double*>(sums.raw()),
                                                           static_cast<float*>(out.loss.raw()));
      CUDA_CHECK_LAUNCH();
    });
  });
  // The one synchronisation: the loss parts are returned as numbers (and bad targets raise here).
  const std::vector<double> s = sums.to_vector<double>();
  out.counted = int64_t(s[2]);
  if (out.counted > 0) {
    out.ce = s[0] / double(out.counted);
    out.z = z_loss_weight * s[1] / double(out.counted);
  }
  return out;
}

void cross_entropy_backward_into(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, double z_loss_weight, int64_t ignore_index, Tensor& grad) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  if (N == 0) return;
  cudaStream_t stream = stream_for(logits.device());
  const Tensor g = grad_loss.to(DType::f32);
  Tensor scale = Tensor::empty({1}, DType::f32, logits.device());
  dispatch_device_float("cross_entropy_backward", logits.dtype(), [&]<typename T>() {
    dispatch_index("cross_entropy_backward", "targets", targets.dtype(), [&]<typename I>() {
      const I* tp = static_cast<const I*>(targets.raw());
      cross_entropy_scale_kernel<I><<<1, 1024, 0, stream>>>(tp, N, V, ignore_index, static_cast<const float*>(g.raw()),
                                                           static_cast<float*>(scale.raw()), device_error_record());
      CUDA_CHECK_LAUNCH();
      cross_entropy_backward_kernel<T, I><<<unsigned(N), kRowThreads, 0, stream>>>(
          static_cast<const T*>(logits.raw()), static_cast<T*>(grad.raw()), tp, static_cast<const float*>(lse.raw()),
          static_cast<const float*>(scale.raw()), V, ignore_index, float(z_loss_weight));
      CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace fathom::cuda
