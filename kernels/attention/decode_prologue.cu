// The CUDA decode prologue: one CTA per sequence (a decoding step has one token each). A batch-1 step
// runs it alone on the critical path between the q/k/v GEMM and attention, so it is built for latency:
//  1. every thread issues all its loads of the q, k and v rows at once (16-byte vectors where the rows
//     allow), keeps q and k in shared memory with their sums of squares, and stores v straight into the
//     cache: one round trip to memory instead of one per stage;
//  2. one barrier gives every thread both sums (the warps' partials added in a fixed order);
//  3. each thread takes rotation pairs (i, i + d/2) of q and k from shared memory, normalises both halves
//     as rms_norm does (y = x rstd w, rounded to the activations' dtype), rotates them in f32 as rope
//     does, and stores q's to the output and k's at the sequence's cache position.
// Each value is rounded where the separate ops round it, so the result is theirs up to the order of the
// f32 sum of squares and where RoPE's multiply-adds are fused (decode_prologue.cuh spells them out; rope.cu
// leaves them to the compiler).
#include <cstdint>

#include "kernels/attention/decode_prologue.cuh"
#include "kernels/attention/decode_prologue.h"
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kThreads = prologue::kParts;  // thread t is part t of the sums of squares
constexpr int kWarps = prologue::kPartWarps;
constexpr int kSlots = 4;  // vectors in flight per thread: 4 x 256 x 16 bytes covers a 1B model's q, k and v

struct PrologueShape {
  int q_heads, kv_heads, head_dim;
  int64_t capacity;
  bool per_row_angles, per_row_past;
  float q_eps, k_eps;
};

// The pairs (i, i + d/2) of every head of row x (in shared memory), normalised and rotated, into out
// (head h's pair at head_offset(h) + i and + d/2).
template <typename T, typename Offset>
__device__ void rotate_row(const T* x, const T* w, float rstd, int heads, int d, const float2* angles, T* out,
                           Offset head_offset) {
  const int half = d / 2;
  for (int e = int(threadIdx.x); e < heads * half; e += kThreads) {
    const int h = e / half, i = e % half;
    const float a = prologue::normed(x, w, h * d + i, rstd), b = prologue::normed(x, w, h * d + i + half, rstd);
    const float2 cs = angles[i];
    T* o = out + head_offset(h);
    o[i] = prologue::rotated<T>(a, b, true, cs);
    o[i + half] = prologue::rotated<T>(b, a, false, cs);
  }
}

// kWidth is 16 / sizeof(T) where every row and head is a whole number of vectors and aligned, else 1.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads)
    decode_prologue_kernel(const T* q, const T* k, const T* v, const T* q_norm, const T* k_norm, const float2* angles,
                           const int32_t* past, T* q_out, T* cache_k, T* cache_v, PrologueShape s) {
  using P = Pack<T, kWidth>;  // device_math.cuh: one 16-byte vector, or one element
  follow_previous_grid();     // dependent_launch.cuh
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  T* staged = reinterpret_cast<T*>(staged_bytes);  // q's row, then k's
  __shared__ float2 warp_sums[kWarps];
  const int b = int(blockIdx.x), d = s.head_dim, nq = s.q_heads * d, nk = s.kv_heads * d;
  const T* qr = q + int64_t(b) * nq;
  const T* kr = k + int64_t(b) * nk;
  const T* vr = v + int64_t(b) * nk;
  // A kernel cannot throw: a position outside the cache writes nothing (the caller checks its counts).
  const int64_t pos = past[s.per_row_past ? b : 0];
  const bool in_cache = pos >= 0 && pos < s.capacity;
  const auto cache_row = [&](int h) { return ((int64_t(b) * s.kv_heads + h) * s.capacity + pos) * d; };

  // 1. Vectors 0 .. nq/W - 1 are q's, then k's, then v's; all of a thread's loads go out before any use.
  const int vq = nq / kWidth, vk = nk / kWidth, total = vq + 2 * vk;
  float ssq = 0, ssk = 0;
  for (int base = 0; base < total; base += kSlots * kThreads) {
    P r[kSlots];
#pragma unroll
    for (int u = 0; u < kSlots; ++u) {
      const int i = base + u * kThreads + int(threadIdx.x);
      if (i >= total) continue;
      const T* from = i < vq ? qr + i * kWidth : i < vq + vk ? kr + (i - vq) * kWidth : vr + (i - vq - vk) * kWidth;
      r[u] = load_pack<kWidth>(from);
    }
#pragma unroll
    for (int u = 0; u < kSlots; ++u) {
      const int i = base + u * kThreads + int(threadIdx.x);
      if (i >= total) continue;
      if (i < vq + vk) {
        (i < vq ? ssq : ssk) += prologue::squares(r[u]);  // part threadIdx.x's order (decode_prologue.cuh)
        store_pack<kWidth>(staged + int64_t(i) * kWidth, r[u]);
      } else if (in_cache) {
        const int c = (i - vq - vk) * kWidth;  // a vector never straddles heads: d is a multiple of kWidth
        store_pack<kWidth>(cache_v + cache_row(c / d) + c % d, r[u]);
      }
    }
  }
  // 2. Both sums, every warp's partial added in warp order.
  ssq = warp_sum(ssq);
  ssk = warp_sum(ssk);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = make_float2(ssq, ssk);
  __syncthreads();  // also publishes the staged rows
  const float2 ss = prologue::sum_parts(warp_sums);
  const float rstd_q = prologue::rstd(q_norm, ss.x, nq, s.q_eps), rstd_k = prologue::rstd(k_norm, ss.y, nk, s.k_eps);

  // 3. The rotations.
  const float2* row_angles = angles + (s.per_row_angles ? int64_t(b) * (d / 2) : 0);
  rotate_row(staged, q_norm, rstd_q, s.q_heads, d, row_angles, q_out + int64_t(b) * nq,
             [d](int h) { return int64_t(h) * d; });
  if (in_cache) rotate_row(staged + nq, k_norm, rstd_k, s.kv_heads, d, row_angles, cache_k, cache_row);
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
  const int64_t staged_bytes = (q.dim(2) + k.dim(2)) * q.dim(3) * dtype_size(q.dtype());
  const int64_t room = int64_t(device_properties(q.device().index).sharedMemPerBlockOptin) -
                       int64_t(sizeof(float2)) * kWarps;  // the static warp_sums take the rest
  FATHOM_CHECK(staged_bytes <= room, "decode_prologue: q and k rows of ", staged_bytes, " bytes exceed the ", room,
               " bytes of shared memory this device gives the kernel to stage them in");
  dispatch_device_float("decode_prologue", q.dtype(), [&]<typename T>() {
    const auto* qn = q_norm.defined() ? static_cast<const T*>(q_norm.raw()) : nullptr;
    const auto* kn = k_norm.defined() ? static_cast<const T*>(k_norm.raw()) : nullptr;
    constexpr int kVector = 16 / sizeof(T);
    const bool vector =
        q.dim(3) % kVector == 0 && all_aligned(16, q.raw(), k.raw(), v.raw(), cache_k.raw(), cache_v.raw());
    const auto launch = [&](auto kernel) {
      cudaStream_t stream = stream_for(q.device());                     // makes the device current for the attribute
      if (staged_bytes + int64_t(sizeof(float2)) * kWarps > 48 * 1024)  // the static warp_sums count too
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(staged_bytes)));
      launch_kernel(kernel, dim3(unsigned(B)), dim3(kThreads), int(staged_bytes), stream,
                    static_cast<const T*>(q.raw()), static_cast<const T*>(k.raw()), static_cast<const T*>(v.raw()), qn,
                    kn, reinterpret_cast<const float2*>(angles.raw()), static_cast<const int32_t*>(past.raw()),
                    static_cast<T*>(q_out.raw()), static_cast<T*>(cache_k.raw()), static_cast<T*>(cache_v.raw()),
                    shape);
    };
    if (vector)
      launch(decode_prologue_kernel<T, kVector>);
    else
      launch(decode_prologue_kernel<T, 1>);
  });
  return q_out;
}

}  // namespace fathom::cuda
