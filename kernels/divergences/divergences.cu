// CUDA divergences (kernels/divergences/divergences.h). softmax_kl: one block per row streams the
// student's and the teacher's row together once, each thread keeping an online softmax of both in
// f32 registers (base 2: a running max and rescaled sum each) and the teacher-weighted sum of
// t - s, so KL = E_p[t - s] / T - (lse_t - lse_s) needs neither softmax stored; the backward reads
// both rows once more. mse: a fixed grid of blocks over the elements. row_cosine: one block per row.
// Every loss ends with one block summing the per-row (per-block) terms in f64 in a fixed order, so
// results repeat bit for bit.
#include <climits>
#include <cmath>

#include "kernels/dispatch.h"
#include "kernels/divergences/divergences.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kRowThreads = 512;
constexpr int kTotalThreads = 1024;
constexpr int kMseThreads = 256;
constexpr int64_t kMseMaxBlocks = 1024;
constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLn2 = 0.6931471805599453;

// Calls f(a_values, b_values, first_index) over two rows [0, n) of one dtype, strided over the
// block's threads: 16-byte packs where both rows share their offset within 16 bytes, else one
// element at a time. Each thread sees its elements in ascending order (sums repeat bit for bit).
template <typename T, typename F>
__device__ __forceinline__ void for_each_pair_in_rows(const T* a, const T* b, int64_t n, F&& f) {
  constexpr int N = 16 / sizeof(T);
  auto one = [&](int64_t i) {
    const float x[1] = {to_float(a[i])}, y[1] = {to_float(b[i])};
    f(x, y, i);
  };
  if (reinterpret_cast<uintptr_t>(a) % 16 != reinterpret_cast<uintptr_t>(b) % 16) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) one(i);
    return;
  }
  struct Packs {
    Pack<T, N> a, b;
  };
  const auto [head, packs] = row_packs(a, n);
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) one(i);
  for_each_pack_batched<kRowLoadBatch>(
      packs,
      [&](int64_t p) {
        const int64_t i = head + p * N;
        return Packs{load_pack<N>(a + i), load_pack<N>(b + i)};
      },
      [&](const Packs& pair, int64_t p) {
        float x[N], y[N];
#pragma unroll
        for (int k = 0; k < N; ++k) x[k] = to_float(pair.a.v[k]), y[k] = to_float(pair.b.v[k]);
        f(x, y, head + p * N);
      });
  for (int64_t i = head + packs * N + threadIdx.x; i < n; i += blockDim.x) one(i);
}

// Running sums of one thread (or, merged, of a row) over values y = x * log2(e) / T:
//   student: ss = sum 2^(ys - ms)
//   teacher: st = sum 2^(yt - mt), w = sum 2^(yt - mt) (t - s)
struct KlSums {
  float ms = -INFINITY, ss = 0;
  float mt = -INFINITY, st = 0, w = 0;

  template <int N>
  __device__ void add(const float (&s)[N], const float (&t)[N], float scale) {
    float ys[N], yt[N];
    float tops = -INFINITY, topt = -INFINITY;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      ys[k] = s[k] * scale;
      yt[k] = t[k] * scale;
      tops = fmaxf(tops, ys[k]);
      topt = fmaxf(topt, yt[k]);
    }
    if (tops > ms) {
      ss *= exp2f(ms - tops);
      ms = tops;
    }
    if (topt > mt) {
      const float r = exp2f(mt - topt);
      st *= r;
      w *= r;
      mt = topt;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) {
      ss += exp2f(ys[k] - ms);
      const float e = exp2f(yt[k] - mt);
      st += e;
      if (e > 0) w += e * (t[k] - s[k]);  // a teacher probability of 0 adds exactly 0
    }
  }
  __device__ void merge(const KlSums& o) {
    const float m1 = fmaxf(ms, o.ms);
    if (m1 != -INFINITY) {
      ss = ss * exp2f(ms - m1) + o.ss * exp2f(o.ms - m1);
      ms = m1;
    }
    const float m2 = fmaxf(mt, o.mt);
    if (m2 != -INFINITY) {
      const float r1 = exp2f(mt - m2), r2 = exp2f(o.mt - m2);
      st = st * r1 + o.st * r2;
      w = w * r1 + o.w * r2;
      mt = m2;
    }
  }
  __device__ KlSums shuffled(int offset) const {
    KlSums o;
    o.ms = __shfl_xor_sync(0xffffffffu, ms, offset);
    o.ss = __shfl_xor_sync(0xffffffffu, ss, offset);
    o.mt = __shfl_xor_sync(0xffffffffu, mt, offset);
    o.st = __shfl_xor_sync(0xffffffffu, st, offset);
    o.w = __shfl_xor_sync(0xffffffffu, w, offset);
    return o;
  }
};

// The row's sums from every thread's, merged in a fixed order; valid in thread 0.
__device__ KlSums block_kl_sums(KlSums acc) {
  __shared__ float ms[32], ss[32], mt[32], st[32], w[32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc.merge(acc.shuffled(offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) ms[warp] = acc.ms, ss[warp] = acc.ss, mt[warp] = acc.mt, st[warp] = acc.st, w[warp] = acc.w;
  __syncthreads();
  KlSums total;
  if (threadIdx.x == 0)
    for (int i = 0; i < int(blockDim.x / 32); ++i) {
      KlSums part;
      part.ms = ms[i], part.ss = ss[i], part.mt = mt[i], part.st = st[i], part.w = w[i];
      total.merge(part);
    }
  return total;
}

// Per row: lse_s, lse_t (of the values over T, natural log) and the row's KL in f64.
template <typename T>
__global__ void softmax_kl_rows_kernel(const T* student, const T* teacher, int64_t n, float inv_t, float* lse_s,
                                       float* lse_t, double* row_kl) {
  const int64_t row = blockIdx.x;
  const float scale = kLog2e * inv_t;
  KlSums acc;
  for_each_pair_in_rows(student + row * n, teacher + row * n, n,
                        [&](const auto& s, const auto& t, int64_t) { acc.add(s, t, scale); });
  const KlSums total = block_kl_sums(acc);
  if (threadIdx.x == 0) {
    const double zs = (double(total.ms) + log2(double(total.ss))) * kLn2;
    const double zt = (double(total.mt) + log2(double(total.st))) * kLn2;
    lse_s[row] = float(zs);
    lse_t[row] = float(zt);
    // sum_j p_j (t_j - s_j) / T - (lse_t - lse_s)
    row_kl[row] = double(total.w) / double(total.st) * double(inv_t) - (zt - zs);
  }
}

// loss = scale * sum of terms[0, count), summed in a fixed order in f64.
__global__ void total_kernel(const double* terms, int64_t count, double scale, float* loss) {
  __shared__ double scratch[32];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += terms[i];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *loss = float(sum * scale);
}

// d/ds_j = g T (q_j - p_j) / rows, g read from the device; q and p from the saved lse.
template <typename T>
__global__ void softmax_kl_backward_kernel(const T* student, const T* teacher, T* grad, int64_t n, float inv_t,
                                           float t_over_rows, const float* grad_loss, const float* lse_s,
                                           const float* lse_t) {
  const int64_t row = blockIdx.x;
  const float scale = kLog2e * inv_t, g = *grad_loss * t_over_rows;
  const float ls = lse_s[row] * kLog2e, lt = lse_t[row] * kLog2e;
  T* out = grad + row * n;
  for_each_pair_in_rows(student + row * n, teacher + row * n, n, [&](const auto& s, const auto& t, int64_t i) {
    constexpr int M = sizeof(s) / sizeof(float);
#pragma unroll
    for (int k = 0; k < M; ++k) out[i + k] = from_float<T>(g * (exp2f(s[k] * scale - ls) - exp2f(t[k] * scale - lt)));
  });
}

// Each block's sum of (x - t)^2 over a fixed grid-stride share, in f64 per block.
template <typename T>
__global__ void mse_partial_kernel(const T* x, const T* target, int64_t n, double* partial) {
  __shared__ double scratch[32];
  float sum = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float d = to_float(x[i]) - to_float(target[i]);
    sum = fmaf(d, d, sum);
  }
  const double total = block_sum(double(sum), scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

template <typename T>
__global__ void mse_backward_kernel(const T* x, const T* target, T* grad, int64_t n, float two_over_n,
                                    const float* grad_loss) {
  const float g = *grad_loss * two_over_n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    grad[i] = from_float<T>(g * (to_float(x[i]) - to_float(target[i])));
}

// Per row: a.b, |a|^2, |b|^2 (f32 per thread, f64 across the block), and the row's cosine.
template <typename T>
__global__ void row_cosine_rows_kernel(const T* a, const T* b, int64_t n, float* sums, double* row_cos) {
  __shared__ double scratch[32];
  const int64_t row = blockIdx.x;
  float uv = 0, uu = 0, vv = 0;
  for_each_pair_in_rows(a + row * n, b + row * n, n, [&](const auto& u, const auto& v, int64_t) {
    constexpr int M = sizeof(u) / sizeof(float);
#pragma unroll
    for (int k = 0; k < M; ++k) uv = fmaf(u[k], v[k], uv), uu = fmaf(u[k], u[k], uu), vv = fmaf(v[k], v[k], vv);
  });
  const double duv = block_sum(double(uv), scratch), duu = block_sum(double(uu), scratch),
               dvv = block_sum(double(vv), scratch);
  if (threadIdx.x == 0) {
    sums[3 * row] = float(duv);
    sums[3 * row + 1] = float(duu);
    sums[3 * row + 2] = float(dvv);
    row_cos[row] = duu > 0 && dvv > 0 ? duv / sqrt(duu * dvv) : 0.0;  // a row of zeros has no direction
  }
}

template <typename T>
__global__ void row_cosine_backward_kernel(const T* a, const T* b, T* ga, T* gb, int64_t n, float inv_rows,
                                           const float* grad_loss, const float* sums) {
  const int64_t row = blockIdx.x;
  const float uv = sums[3 * row], uu = sums[3 * row + 1], vv = sums[3 * row + 2];
  const bool directed = uu > 0 && vv > 0;
  const float g = *grad_loss * inv_rows;
  const float inv = directed ? rsqrtf(uu) * rsqrtf(vv) : 0.0f, c = uv * inv;
  const float cu = directed ? c / uu : 0.0f, cv = directed ? c / vv : 0.0f;
  const int64_t base = row * n;
  for_each_pair_in_rows(a + base, b + base, n, [&](const auto& u, const auto& v, int64_t i) {
    constexpr int M = sizeof(u) / sizeof(float);
#pragma unroll
    for (int k = 0; k < M; ++k) {
      // d cos / d u = v / (|u||v|) - cos u / |u|^2, and symmetrically for v.
      ga[base + i + k] = from_float<T>(g * (v[k] * inv - cu * u[k]));
      gb[base + i + k] = from_float<T>(g * (u[k] * inv - cv * v[k]));
    }
  });
}

// The one-element upstream gradient as f32 on the device.
Tensor upstream_f32(const Tensor& grad_loss) { return grad_loss.to(DType::f32).view(Shape{1}); }

void check_rows(const char* op, const Tensor& input) {
  FATHOM_CHECK(input.shape().last() <= INT32_MAX && input.shape().rows() <= INT32_MAX, op, ": ", describe(input),
               " exceeds the CUDA kernels' limit of 2^31 - 1 rows and row elements");
}

template <typename T>
const T* in_ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw());
}
template <typename T>
T* out_ptr(Tensor& t) {
  return static_cast<T*>(t.raw());
}

}  // namespace

SoftmaxKlOutput softmax_kl_forward(const Tensor& student, const Tensor& teacher, double temperature) {
  check_rows("softmax_kl", student);
  const int64_t n = student.shape().last(), rows = student.shape().rows();
  const Device device = student.device();
  SoftmaxKlOutput out;
  out.loss = Tensor::empty(Shape{}, DType::f32, device);
  out.lse_student = Tensor::empty({rows}, DType::f32, device);
  out.lse_teacher = Tensor::empty({rows}, DType::f32, device);
  Tensor row_kl = Tensor::empty({rows}, DType::f64, device);
  cudaStream_t stream = stream_for(device);
  dispatch_device_float("softmax_kl", student.dtype(), [&]<typename T>() {
    softmax_kl_rows_kernel<T><<<unsigned(rows), kRowThreads, 0, stream>>>(
        in_ptr<T>(student), in_ptr<T>(teacher), n, float(1.0 / temperature), out_ptr<float>(out.lse_student),
        out_ptr<float>(out.lse_teacher), out_ptr<double>(row_kl));
    CUDA_CHECK_LAUNCH();
  });
  total_kernel<<<1, kTotalThreads, 0, stream>>>(in_ptr<double>(row_kl), rows, temperature * temperature / double(rows),
                                                out_ptr<float>(out.loss));
  CUDA_CHECK_LAUNCH();
  return out;
}

Tensor softmax_kl_backward(const Tensor& grad_loss, const Tensor& student, const Tensor& teacher,
                           const Tensor& lse_student, const Tensor& lse_teacher, double temperature) {
  check_rows("softmax_kl_backward", student);
  FATHOM_CHECK(lse_student.dtype() == DType::f32, "softmax_kl_backward: the CUDA kernel takes F32 lse, got ",
               describe(lse_student));
  const int64_t n = student.shape().last(), rows = student.shape().rows();
  const Tensor g = upstream_f32(grad_loss);
  Tensor grad = Tensor::empty(student.shape(), student.dtype(), student.device());
  cudaStream_t stream = stream_for(student.device());
  dispatch_device_float("softmax_kl_backward", student.dtype(), [&]<typename T>() {
    softmax_kl_backward_kernel<T><<<unsigned(rows), kRowThreads, 0, stream>>>(
        in_ptr<T>(student), in_ptr<T>(teacher), out_ptr<T>(grad), n, float(1.0 / temperature),
        float(temperature / double(rows)), in_ptr<float>(g), in_ptr<float>(lse_student), in_ptr<float>(lse_teacher));
    CUDA_CHECK_LAUNCH();
  });
  return grad;
}

Tensor mse_forward(const Tensor& x, const Tensor& target) {
  const int64_t n = x.numel();
  const Device device = x.device();
  const unsigned blocks = grid_for(n, kMseThreads, kMseMaxBlocks);
  Tensor loss = Tensor::empty(Shape{}, DType::f32, device);
  Tensor partial = Tensor::empty({int64_t(blocks)}, DType::f64, device);
  cudaStream_t stream = stream_for(device);
  dispatch_device_float("mse", x.dtype(), [&]<typename T>() {
    mse_partial_kernel<T>
        <<<blocks, kMseThreads, 0, stream>>>(in_ptr<T>(x), in_ptr<T>(target), n, out_ptr<double>(partial));
    CUDA_CHECK_LAUNCH();
  });
  total_kernel<<<1, kTotalThreads, 0, stream>>>(in_ptr<double>(partial), int64_t(blocks), 1.0 / double(n),
                                                out_ptr<float>(loss));
  CUDA_CHECK_LAUNCH();
  return loss;
}

Tensor mse_backward(const Tensor& grad_loss, const Tensor& x, const Tensor& target) {
  const int64_t n = x.numel();
  const Tensor g = upstream_f32(grad_loss);
  Tensor grad = Tensor::empty(x.shape(), x.dtype(), x.device());
  cudaStream_t stream = stream_for(x.device());
  dispatch_device_float("mse_backward", x.dtype(), [&]<typename T>() {
    mse_backward_kernel<T><<<grid_for(n, kMseThreads), kMseThreads, 0, stream>>>(
        in_ptr<T>(x), in_ptr<T>(target), out_ptr<T>(grad), n, float(2.0 / double(n)), in_ptr<float>(g));
    CUDA_CHECK_LAUNCH();
  });
  return grad;
}

RowCosineOutput row_cosine_forward(const Tensor& a, const Tensor& b) {
  check_rows("row_cosine", a);
  const int64_t n = a.shape().last(), rows = a.shape().rows();
  const Device device = a.device();
  RowCosineOutput out;
  out.loss = Tensor::empty(Shape{}, DType::f32, device);
  out.sums = Tensor::empty({rows, 3}, DType::f32, device);
  Tensor row_cos = Tensor::empty({rows}, DType::f64, device);
  // Gate rows are short (a layer's key dimensions): a quarter of a long row's threads.
  const int threads = n >= 4096 ? kRowThreads : 128;
  cudaStream_t stream = stream_for(device);
  dispatch_device_float("row_cosine", a.dtype(), [&]<typename T>() {
    row_cosine_rows_kernel<T><<<unsigned(rows), threads, 0, stream>>>(
        in_ptr<T>(a), in_ptr<T>(b), n, out_ptr<float>(out.sums), out_ptr<double>(row_cos));
    CUDA_CHECK_LAUNCH();
  });
  total_kernel<<<1, kTotalThreads, 0, stream>>>(in_ptr<double>(row_cos), rows, 1.0 / double(rows),
                                                out_ptr<float>(out.loss));
  CUDA_CHECK_LAUNCH();
  return out;
}

std::pair<Tensor, Tensor> row_cosine_backward(const Tensor& grad_loss, const Tensor& a, const Tensor& b,
                                              const Tensor& sums) {
  check_rows("row_cosine_backward", a);
  FATHOM_CHECK(sums.dtype() == DType::f32, "row_cosine_backward: the CUDA kernel takes F32 sums, got ", describe(sums));
  const int64_t n = a.shape().last(), rows = a.shape().rows();
  const Tensor g = upstream_f32(grad_loss);
  Tensor ga = Tensor::empty(a.shape(), a.dtype(), a.device()), gb = Tensor::empty(b.shape(), b.dtype(), b.device());
  const int threads = n >= 4096 ? kRowThreads : 128;
  cudaStream_t stream = stream_for(a.device());
  dispatch_device_float("row_cosine_backward", a.dtype(), [&]<typename T>() {
    row_cosine_backward_kernel<T><<<unsigned(rows), threads, 0, stream>>>(in_ptr<T>(a), in_ptr<T>(b), out_ptr<T>(ga),
                                                                          out_ptr<T>(gb), n, float(1.0 / double(rows)),
                                                                          in_ptr<float>(g), in_ptr<float>(sums));
    CUDA_CHECK_LAUNCH();
  });
  return {ga, gb};
}

}  // namespace fathom::cuda
