// CUDA elementwise ops and reductions. Reductions are deterministic: a grid whose size depends only
// on the element count writes one f64 partial per block (threads accumulate in f64, blocks combine
// in a fixed tree), then a single block sums the partials in a fixed order.
#include "kernels/elementwise/elementwise.h"
#include "kernels/runtime/elementwise_map.cuh"
#include "kernels/runtime/float_dispatch.h"

namespace fathom::cuda {

namespace {

constexpr int kPack = 4;  // 16 bytes of f32, 8 of bf16

template <typename D, typename S>
struct AxpyOp {
  D* dst;
  const S* src;
  float alpha;
  template <int N>
  __device__ void apply(int64_t i) const {
    Pack<D, N> d = load_pack<N>(dst + i);
    const Pack<S, N> s = load_pack<N>(src + i);
#pragma unroll
    for (int k = 0; k < N; ++k) d.v[k] = from_float<D>(to_float(d.v[k]) + alpha * to_float(s.v[k]));
    store_pack<N>(dst + i, d);
  }
};

template <typename T>
struct AddOp {
  const T* a;
  const T* b;
  T* out;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<T, N> x = load_pack<N>(a + i), y = load_pack<N>(b + i);
    Pack<T, N> z;
#pragma unroll
    for (int k = 0; k < N; ++k) z.v[k] = from_float<T>(to_float(x.v[k]) + to_float(y.v[k]));
    store_pack<N>(out + i, z);
  }
};

template <typename T>
struct ScaleOp {
  T* dst;
  float alpha;
  template <int N>
  __device__ void apply(int64_t i) const {
    Pack<T, N> d = load_pack<N>(dst + i);
#pragma unroll
    for (int k = 0; k < N; ++k) d.v[k] = from_float<T>(to_float(d.v[k]) * alpha);
    store_pack<N>(dst + i, d);
  }
};

enum class Reduction { sum, sum_squares, non_finite_count };

template <Reduction R>
__device__ __forceinline__ double reduce_term(float x) {
  if constexpr (R == Reduction::sum)
    return double(x);
  else if constexpr (R == Reduction::sum_squares)
    return double(x) * double(x);
  else
    return isfinite(x) ? 0.0 : 1.0;
}

constexpr int kReduceThreads = 256;
constexpr int kMaxPartials = 1024;

template <Reduction R, int N, typename T>
__global__ void reduce_partials_kernel(const T* x, int64_t n, double* partials) {
  __shared__ double scratch[32];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  double acc = 0;
  const int64_t packs = n / N;
  for (int64_t p = first; p < packs; p += stride) {
    const Pack<T, N> v = load_pack<N>(x + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) acc += reduce_term<R>(to_float(v.v[k]));
  }
  for (int64_t i = packs * N + first; i < n; i += stride) acc += reduce_term<R>(to_float(x[i]));
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(const double* partials, int count, double* out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

template <Reduction R>
double reduce(const char* op, const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return 0.0;
  cudaStream_t stream = stream_for(t.device());
  // The block count depends on n alone, so the summation order (and result) repeats exactly.
  const int blocks =
      int(std::min<int64_t>(kMaxPartials, (n + kReduceThreads * kPack * 4 - 1) / (kReduceThreads * kPack * 4)));
  Tensor partials = Tensor::empty({blocks + 1}, DType::f64, t.device());
  double* p = partials.data<double>();
  dispatch_device_float(op, t.dtype(), [&]<typename T>() {
    const T* x = static_cast<const T*>(t.raw());
    constexpr int N = 16 / sizeof(T);  // 16-byte loads
    if (aligned_to(16, x))
      reduce_partials_kernel<R, N><<<blocks, kReduceThreads, 0, stream>>>(x, n, p);
    else
      reduce_partials_kernel<R, 1><<<blocks, kReduceThreads, 0, stream>>>(x, n, p);
    CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, 1024, 0, stream>>>(p, blocks, p + blocks);
  CUDA_CHECK_LAUNCH();
  return partials.narrow(blocks, 1).item();
}

}  // namespace

void axpy_inplace(Tensor& dst, double alpha, const Tensor& src) {
  cudaStream_t stream = stream_for(dst.device());
  dispatch_device_float("axpy_inplace", dst.dtype(), [&]<typename D>() {
    dispatch_device_float("axpy_inplace", src.dtype(), [&]<typename S>() {
      D* d = static_cast<D*>(dst.raw());
      const S* s = static_cast<const S*>(src.raw());
      run_map<kPack>(dst.numel(), aligned_to(kPack * sizeof(D), d) && aligned_to(kPack * sizeof(S), s),
                     AxpyOp<D, S>{d, s, float(alpha)}, stream);
    });
  });
}

void add_inplace(Tensor& dst, const Tensor& src) { cuda::axpy_inplace(dst, 1.0, src); }

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  cudaStream_t stream = stream_for(a.device());
  dispatch_device_float("add", a.dtype(), [&]<typename T>() {
    const T* x = static_cast<const T*>(a.raw());
    const T* y = static_cast<const T*>(b.raw());
    T* z = static_cast<T*>(out.raw());
    run_map<kPack>(a.numel(), all_aligned(kPack * sizeof(T), x, y, z), AddOp<T>{x, y, z}, stream);
  });
  return out;
}

void scale_inplace(Tensor& dst, double alpha) {
  cudaStream_t stream = stream_for(dst.device());
  dispatch_device_float("scale_inplace", dst.dtype(), [&]<typename T>() {
    T* d = static_cast<T*>(dst.raw());
    run_map<kPack>(dst.numel(), aligned_to(kPack * sizeof(T), d), ScaleOp<T>{d, float(alpha)}, stream);
  });
}

double sum_squares(const Tensor& t) { return reduce<Reduction::sum_squares>("sum_squares", t); }
double sum(const Tensor& t) { return reduce<Reduction::sum>("sum", t); }
bool all_finite(const Tensor& t) { return reduce<Reduction::non_finite_count>("all_finite", t) == 0.0; }

}  // namespace fathom::cuda
