// The CUDA decode prologue: one CTA per sequence (a decoding step has one token each). The CTA sums the
// squares of its q and k rows (QK-norm), then each thread takes rotation pairs (i, i + d/2) of q and k,
// normalises both halves as rms_norm does (y = x rstd w, rounded to the activations' dtype), rotates them
// in f32 as rope does, and stores q's to the output and k's, with v, at the sequence's cache position.
// Each value is rounded where the separate ops round it, so the result is theirs up to the order of the
// f32 sum of squares.
#include <cstdint>

#include "kernels/attention/decode_prologue.h"
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kThreads = 256;

struct PrologueShape {
  int q_heads, kv_heads, head_dim;
  int64_t capacity;
  bool per_row_angles, per_row_past;
  float q_eps, k_eps;
};

// rstd of a row of n values: 1 / sqrt(mean(x^2) + eps), as rms_norm computes it.
template <typename T>
__device__ float row_rstd(const T* x, int n, float eps, float* scratch) {
  float ss = 0;
  for (int c = int(threadIdx.x); c < n; c += kThreads) {
    const float v = to_float(x[c]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  return 1.0f / sqrtf(ss / float(n) + eps);
}

// x[c] normalised (rounded to T as rms_norm's output is), or x[c] itself without a norm.
template <typename T>
__device__ __forceinline__ float normed(const T* x, const T* w, int c, float rstd) {
  return w ? to_float(from_float<T>(to_float(x[c]) * rstd * to_float(w[c]))) : to_float(x[c]);
}

// The pairs (i, i + d/2) of every head of row x, normalised and rotated, into out (head h's pair at
// head_offset(h) + i and + d/2).
template <typename T, typename Offset>
__device__ void rotate_row(const T* x, const T* w, float rstd, int heads, int d, const float2* angles, T* out,
                           Offset head_offset) {
  const int half = d / 2;
  for (int e = int(threadIdx.x); e < heads * half; e += kThreads) {
    const int h = e / half, i = e % half;
    const float a = normed(x, w, h * d + i, rstd), b = normed(x, w, h * d + i + half, rstd);
    const float2 cs = angles[i];
    T* o = out + head_offset(h);
    o[i] = from_float<T>(a * cs.x - b * cs.y);
    o[i + half] = from_float<T>(b * cs.x + a * cs.y);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    decode_prologue_kernel(const T* q, const T* k, const T* v, const T* q_norm, const T* k_norm, const float2* angles,
                           const int32_t* past, T* q_out, T* cache_k, T* cache_v, PrologueShape s) {
  follow_previous_grid();  // dependent_launch.cuh
  __shared__ float scratch[32];
  const int b = int(blockIdx.x), d = s.head_dim, nq = s.q_heads * d, nk = s.kv_heads * d;
  const T* qr = q + int64_t(b) * nq;
  const T* kr = k + int64_t(b) * nk;
  const T* vr = v + int64_t(b) * nk;
  const float rstd_q = q_norm ? row_rstd(qr, nq, s.q_eps, scratch) : 1.f;
  const float rstd_k = k_norm ? row_rstd(kr, nk, s.k_eps, scratch) : 1.f;
  const float2* row_angles = angles + (s.per_row_angles ? int64_t(b) * (d / 2) : 0);
  rotate_row(qr, q_norm, rstd_q, s.q_heads, d, row_angles, q_out + int64_t(b) * nq,
             [d](int h) { return int64_t(h) * d; });
  // A kernel cannot throw: a position outside the cache writes nothing (the caller checks its counts).
  const int64_t pos = past[s.per_row_past ? b : 0];
  if (pos < 0 || pos >= s.capacity) return;
  const auto cache_row = [&](int h) { return ((int64_t(b) * s.kv_heads + h) * s.capacity + pos) * d; };
  rotate_row(kr, k_norm, rstd_k, s.kv_heads, d, row_angles, cache_k, cache_row);
  for (int c = int(threadIdx.x); c < nk; c += kThreads) cache_v[cache_row(c / d) + c % d] = vr[c];
}

}  // namespace

Tensor decode_prologue(const Tensor& q, const Tensor& k, const Tensor& v, const QkNorm& norm, const Tensor& angles,
                       Tensor& cache_k, Tensor& cache_v, const Tensor& past) {
  const Tensor &q_norm = norm.q, &k_norm = norm.k;
  Tensor q_out = Tensor::empty(q.shape(), q.dtype(), q.device());
  const int64_t B = q.dim(0);
  if (B == 0) return q_out;
  const PrologueShape shape{int(q.dim(2)),      int(k.dim(2)),    int(q.dim(3)),     cache_k.dim(2),
                            angles.rank() == 4, past.dim(0) == B, float(norm.q_eps), float(norm.k_eps)};
  dispatch_device_float("decode_prologue", q.dtype(), [&]<typename T>() {
    const auto* qn = q_norm.defined() ? static_cast<const T*>(q_norm.raw()) : nullptr;
    const auto* kn = k_norm.defined() ? static_cast<const T*>(k_norm.raw()) : nullptr;
    launch_kernel(decode_prologue_kernel<T>, dim3(unsigned(B)), dim3(kThreads), 0, stream_for(q.device()),
                  static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()), static_cast<const T*>(v.raw()), qn,
                  kn, reinterpret_cast<const float2*>(angles.raw()), static_cast<const int32_t*>(past.raw()),
                  static_cast<T*>(q_out.raw()), static_cast<T*>(cache_k.raw()), static_cast<T*>(cache_v.raw()), shape);
  });
  return q_out;
}

}  // namespace fathom::cuda
