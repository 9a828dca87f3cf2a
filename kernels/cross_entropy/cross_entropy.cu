// CUDA cross-entropy with z-loss. Forward: one block per row reads the logits once (bf16 or f32,
// never widened in memory), keeping a running max and rescaled sum in f32 registers (online softmax,
// base 2), and writes the row's lse and loss terms; one block then sums the rows in a fixed order in
// f64. Backward: one block per row reads the logits once more and writes
// dlogits = softmax * g (1 + 2 w lse) - g [j = target], out of place or over the logits themselves.
// The fused forward does both in one pass over each row (the training step's logits, owned by the
// loss), with the same row reduction and gradient formula, so its results are the same bits.
#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/dispatch.h"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kRowThreads = 512;
// Blocks of the fused kernel kept on one SM at once: two keep the memory system busy while one
// block reduces, and bound the rows in flight (whose unstashed part must stay in L2) to 2 per SM.
constexpr int kFusedBlocksPerSm = 2;
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

// The row's log-sum-exp from every thread's running sum, merged in a fixed order (results repeat
// bit for bit); returned to every thread.
__device__ float block_lse(RunningSum acc) {
  __shared__ float shared_m[32], shared_s[32];
  __shared__ float lse;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    acc.merge(__shfl_xor_sync(0xffffffffu, acc.m, offset), __shfl_xor_sync(0xffffffffu, acc.s, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    shared_m[warp] = acc.m;
    shared_s[warp] = acc.s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    RunningSum total;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total.merge(shared_m[w], shared_s[w]);  // fixed order
    lse = (total.m + log2f(total.s)) * kLn2;
  }
  __syncthreads();
  return lse;
}

// A row's target and its logit, read by thread 0 before the row may be overwritten.
struct RowTarget {
  int64_t t = -1;  // -1: ignored (or reported as out of range)
  float logit = 0;
};
template <typename T, typename I>
__device__ RowTarget read_row_target(const T* x, const I* targets, int64_t row, int64_t vocab, int64_t ignore_index,
                                     DeviceErrorRecord* errors) {
  RowTarget r;
  r.t = checked_target(targets, row, vocab, ignore_index, errors);
  if (r.t >= 0) r.logit = to_float(x[r.t]);
  return r;
}

// Thread 0's outputs for a row: its lse and loss terms (zero for an ignored row).
__device__ void write_row_terms(int64_t row, const RowTarget& target, float lse, float* lse_out, double* row_terms) {
  lse_out[row] = lse;
  row_terms[2 * row] = target.t < 0 ? 0.0 : double(lse) - double(target.logit);
  row_terms[2 * row + 1] = target.t < 0 ? 0.0 : double(lse) * double(lse);
}

// dlogits_j = softmax_j * g (1 + 2 w lse) - g [j = target] for one row, g = *scale on a counted row
// and 0 on an ignored one (whose gradient is then 0).
struct RowGradient {
  float l2, coef, g;
  int t;  // rows are under 2^31 elements (checked at launch): one 32-bit compare per element
  __device__ RowGradient(int64_t target, int64_t vocab, int64_t ignore_index, float scale, float lse,
                         float z_loss_weight) {
    const bool counted = target != ignore_index && target >= 0 && target < vocab;
    g = counted ? scale : 0.0f;
    l2 = lse * kLog2e;
    coef = g * (1.0f + 2.0f * z_loss_weight * lse);
    t = counted ? int(target) : -1;
  }
  __device__ float operator()(float v, int64_t j) const {
    const float p = exp2f(v * kLog2e - l2) * coef;
    return int(j) == t ? p - g : p;
  }
};

template <typename T, typename I>
__global__ void cross_entropy_rows_kernel(const T* logits, const I* targets, int64_t vocab, int64_t ignore_index,
                                          float* lse_out, double* row_terms, DeviceErrorRecord* errors) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  RunningSum acc;
  for_each_pack_in_row(x, vocab, [&](const auto& values, int64_t) { acc.add(values); });
  RowTarget target;
  if (threadIdx.x == 0) target = read_row_target(x, targets, row, vocab, ignore_index, errors);
  const float lse = block_lse(acc);
  if (threadIdx.x == 0) write_row_terms(row, target, lse, lse_out, row_terms);
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
  const RowGradient gradient(int64_t(targets[row]), vocab, ignore_index, *scale, lse[row], z_loss_weight);
  transform_row(logits + row * vocab, grad + row * vocab, vocab, gradient);
}

// The forward and the gradient in one pass over each row (one block per row, the rows kernel's
// reduction, so lse and the loss terms are the same bits). The row is read from global memory once:
// its first `stashed` elements are kept in shared memory as they stream by, the rest is read again
// for the gradient while it is still in L2 (few rows are in flight at once: the shared stash bounds
// the blocks per SM). The stash mirrors the row's 16-byte alignment (element j at misalign + j), so
// its packs are aligned wherever global packs are. The gradient then overwrites the row.
template <typename T, typename I>
__global__ void __launch_bounds__(kRowThreads, kFusedBlocksPerSm)
    cross_entropy_fused_kernel(T* logits, const I* targets, int64_t vocab, int64_t ignore_index, int64_t stash_capacity,
                               const float* scale, float z_loss_weight, float* lse_out, double* row_terms,
                               DeviceErrorRecord* errors) {
  extern __shared__ __align__(16) unsigned char stash_bytes[];
  T* const stash = reinterpret_cast<T*>(stash_bytes);
  const int64_t row = blockIdx.x;
  T* const x = logits + row * vocab;
  const int64_t misalign = int64_t(reinterpret_cast<uintptr_t>(x) % 16) / int64_t(sizeof(T));
  // stash_capacity is a whole number of packs, so no pack straddles the stash's end.
  const int64_t stashed = min(vocab, stash_capacity - misalign);
  // The rows kernel's walk (the same values in the same order per thread, so the same sums), each
  // pack stashed as it was read.
  RunningSum acc;
  for_each_raw_pack_in_row(x, vocab, [&]<int M>(const Pack<T, M>& pack, int64_t i) {
    float v[M];
#pragma unroll
    for (int k = 0; k < M; ++k) v[k] = to_float(pack.v[k]);
    acc.add(v);
    if (i < stashed) store_pack<M>(stash + misalign + i, pack);
  });
  RowTarget target;
  if (threadIdx.x == 0) target = read_row_target(x, targets, row, vocab, ignore_index, errors);
  // Its barriers also end every read of the row from global memory and publish the stash.
  const float lse = block_lse(acc);
  if (threadIdx.x == 0) write_row_terms(row, target, lse, lse_out, row_terms);
  const RowGradient gradient(int64_t(targets[row]), vocab, ignore_index, *scale, lse, z_loss_weight);
  // Each element is read (stash or global) and overwritten by the same thread.
  auto load = [&]<int N>(int64_t i) { return i < stashed ? load_pack<N>(stash + misalign + i) : load_pack<N>(x + i); };
  auto store = [&]<int N>(const Pack<T, N>& in, int64_t i) {
    Pack<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = from_float<T>(gradient(to_float(in.v[k]), i + k));
    store_pack<N>(x + i, out);
  };
  constexpr int N = 16 / sizeof(T);
  const auto [head, packs] = row_packs(x, vocab);
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) store(load.template operator()<1>(i), i);
  for_each_pack_batched<kRowLoadBatch>(
      packs, [&](int64_t p) { return load.template operator()<N>(head + p * N); },
      [&](const Pack<T, N>& in, int64_t p) { store(in, head + p * N); });
  for (int64_t i = head + packs * N + threadIdx.x; i < vocab; i += blockDim.x) store(load.template operator()<1>(i), i);
}

// grad *= upstream / expected unless they are equal: then every block reads the two scalars and exits.
template <typename T, typename S>
__global__ void scale_unless_expected_kernel(T* grad, int64_t n, const S* upstream, const S* expected) {
  const S u = *upstream, e = *expected;
  if (u == e) return;
  const float ratio = float(double(u) / double(e));
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    grad[i] = from_float<T>(to_float(grad[i]) * ratio);
}

// Per-block shared memory the stash leaves to the runtime's reservation and the kernel's own arrays.
constexpr size_t kSharedReservePerBlock = 2048;

// The stash's shared-memory bytes for rows of `vocab` elements of T on `device`: the whole row
// (plus one pack for its alignment offset) when it fits in the SM's share, else that share.
template <typename T>
size_t fused_stash_bytes(int64_t vocab, Device device) {
  const cudaDeviceProp& prop = device_properties(device.index);
  const size_t share = std::min(size_t(prop.sharedMemPerBlockOptin),
                                size_t(prop.sharedMemPerMultiprocessor) / kFusedBlocksPerSm - kSharedReservePerBlock);
  const size_t row = (size_t(vocab) * sizeof(T) + 15) / 16 * 16 + 16;
  return std::min(row, share / 16 * 16);
}

}  // namespace

namespace {

// The row kernels index a row's elements in 32 bits.
void check_row_width(const char* op, int64_t vocab) {
  FATHOM_CHECK(vocab <= INT32_MAX, op, ": rows of ", vocab, " logits exceed the CUDA kernels' limit of 2^31 - 1");
}

// The loss parts from the device sums: the one synchronisation (bad targets raise here too).
void read_loss_parts(const Tensor& sums, double z_loss_weight, CrossEntropyOutput& out) {
  const std::vector<double> s = sums.to_vector<double>();
  out.counted = int64_t(s[2]);
  if (out.counted > 0) {
    out.ce = s[0] / double(out.counted);
    out.z = z_loss_weight * s[1] / double(out.counted);
  }
}

// The forward, and with grad_loss defined the gradient fused in over the logits (which then must
// be writable: the caller owns them).
CrossEntropyOutput forward(const Tensor& logits, const Tensor& targets, double z_loss_weight, int64_t ignore_index,
                           const Tensor& grad_loss, bool read_parts) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  check_row_width("cross_entropy", V);
  CrossEntropyOutput out;
  out.lse = Tensor::empty({N}, DType::f32, logits.device());
  out.loss = Tensor::empty(Shape{}, DType::f32, logits.device());
  out.sums = Tensor::empty({3}, DType::f64, logits.device());
  if (N == 0) {
    out.loss.zero_();
    out.sums.zero_();
    return out;
  }
  cudaStream_t stream = stream_for(logits.device());
  Tensor row_terms = Tensor::empty({N, 2}, DType::f64, logits.device());
  Tensor scale = grad_loss.defined() ? Tensor::empty({1}, DType::f32, logits.device()) : Tensor();
  dispatch_device_float("cross_entropy", logits.dtype(), [&]<typename T>() {
    dispatch_index("cross_entropy", "targets", targets.dtype(), [&]<typename I>() {
      const I* tp = static_cast<const I*>(targets.raw());
      float* lse = static_cast<float*>(out.lse.raw());
      double* terms = static_cast<double*>(row_terms.raw());
      if (grad_loss.defined()) {
        // The mean's divisor (the counted rows) first, then the rows with their gradients.
        cross_entropy_scale_kernel<I><<<1, 1024, 0, stream>>>(tp, N, V, ignore_index,
                                                              static_cast<const float*>(grad_loss.raw()),
                                                              static_cast<float*>(scale.raw()), device_error_record());
        CUDA_CHECK_LAUNCH();
        const size_t smem = fused_stash_bytes<T>(V, logits.device());
        auto kernel = cross_entropy_fused_kernel<T, I>;
        if (smem > 48 * 1024)
          CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        kernel<<<unsigned(N), kRowThreads, smem, stream>>>(
            static_cast<T*>(const_cast<void*>(logits.raw())), tp, V, ignore_index, int64_t(smem / sizeof(T)),
            static_cast<const float*>(scale.raw()), float(z_loss_weight), lse, terms, device_error_record());
      } else {
        cross_entropy_rows_kernel<T, I><<<unsigned(N), kRowThreads, 0, stream>>>(
            static_cast<const T*>(logits.raw()), tp, V, ignore_index, lse, terms, device_error_record());
      }
      CUDA_CHECK_LAUNCH();
      cross_entropy_total_kernel<I><<<1, 1024, 0, stream>>>(terms, tp, N, V, ignore_index, z_loss_weight,
                                                            static_cast<double*>(out.sums.raw()),
                                                            static_cast<float*>(out.loss.raw()));
      CUDA_CHECK_LAUNCH();
    });
  });
  if (read_parts) read_loss_parts(out.sums, z_loss_weight, out);
  return out;
}

}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double z_loss_weight,
                                         int64_t ignore_index) {
  return forward(logits, targets, z_loss_weight, ignore_index, Tensor(), true);
}

CrossEntropyOutput cross_entropy_forward_with_grad(Tensor& logits, const Tensor& targets, double z_loss_weight,
                                                   int64_t ignore_index, const Tensor& grad_loss, bool read_parts) {
  return forward(logits, targets, z_loss_weight, ignore_index, grad_loss, read_parts);
}

void cross_entropy_backward_into(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, double z_loss_weight, int64_t ignore_index, Tensor& grad) {
  const int64_t N = logits.dim(0), V = logits.dim(1);
  check_row_width("cross_entropy_backward", V);
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

void scale_grad_unless_expected(Tensor& grad, const Tensor& upstream, const Tensor& expected) {
  FATHOM_CHECK(expected.dtype() == DType::f32,
               "scale_grad_unless_expected: the CUDA kernel takes an F32 upstream and "
               "expected gradient (the loss's dtype), got ",
               describe(expected));
  const int64_t n = grad.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  cudaStream_t stream = stream_for(grad.device());
  dispatch_device_float("scale_grad_unless_expected", grad.dtype(), [&]<typename T>() {
    scale_unless_expected_kernel<T, float><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(grad.raw()), n, static_cast<const float*>(upstream.raw()),
        static_cast<const float*>(expected.raw()));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace fathom::cuda
