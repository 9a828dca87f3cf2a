// Device dtype conversion and fill: what Tensor::to(dtype) and Tensor::fill_ run on a GPU.
#include "kernels/runtime/elementwise_map.cuh"
#include "kernels/runtime/tensor_ops.h"

namespace fathom::cuda {

namespace {

template <typename T>
constexpr bool is_16_or_32_bit_float =
    std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

template <typename T>
__device__ __forceinline__ double to_double(T x) {
  if constexpr (is_16_or_32_bit_float<T>)
    return double(to_float(x));
  else
    return double(x);
}
template <typename T>
__device__ __forceinline__ T from_double(double x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __double2bfloat16(x);
  else if constexpr (std::is_same_v<T, __half>)
    return __double2half(x);
  else
    return T(x);
}

// Floats among themselves through float (exact for the wider type, one rounding to the narrower);
// integers among themselves directly; anything else through double.
template <typename To, typename From>
__device__ __forceinline__ To convert(From x) {
  if constexpr (is_16_or_32_bit_float<From> && is_16_or_32_bit_float<To>)
    return from_float<To>(to_float(x));
  else if constexpr (std::is_integral_v<From> && std::is_integral_v<To>)
    return To(x);
  else
    return from_double<To>(to_double(x));
}

template <typename From, typename To>
struct CastOp {
  const From* src;
  To* dst;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Pack<From, N> a = load_pack<N>(src + i);
    Pack<To, N> b;
#pragma unroll
    for (int k = 0; k < N; ++k) b.v[k] = convert<To>(a.v[k]);
    store_pack<N>(dst + i, b);
  }
};

template <typename T>
struct FillOp {
  T* dst;
  double value;
  template <int N>
  __device__ void apply(int64_t i) const {
    Pack<T, N> b;
#pragma unroll
    for (int k = 0; k < N; ++k) b.v[k] = from_double<T>(value);
    store_pack<N>(dst + i, b);
  }
};

template <typename F>
void dispatch_any(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::bf16:
      return f.template operator()<__nv_bfloat16>();
    case DType::f16:
      return f.template operator()<__half>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::i32:
      return f.template operator()<int32_t>();
    case DType::i64:
      return f.template operator()<int64_t>();
    case DType::u8:
      return f.template operator()<uint8_t>();
    case DType::e4m3:
    case DType::e5m2:
      FATHOM_FAIL("cast and fill: ", dtype_name(t),
                  " tensors on the GPU are made by the scaled casts of kernels/fp8 (copy to the CPU to convert)");
  }
  FATHOM_FAIL("unknown dtype ", int(t));
}

}  // namespace

void cast(const Tensor& src, Tensor& dst) {
  FATHOM_CHECK(src.shape() == dst.shape() && src.device() == dst.device() && src.device().is_cuda(),
               "cast: ", describe(src), " into ", describe(dst));
  cudaStream_t stream = stream_for(dst.device());
  dispatch_any(src.dtype(), [&]<typename From>() {
    dispatch_any(dst.dtype(), [&]<typename To>() {
      const CastOp<From, To> op{static_cast<const From*>(src.raw()), static_cast<To*>(dst.raw())};
      // Packs of 4 for the common float conversions only; 8-byte types go one at a time.
      constexpr bool small = sizeof(From) <= 4 && sizeof(To) <= 4;
      run_map<small ? 4 : 1>(
          src.numel(), small && all_aligned(4 * sizeof(From), src.raw()) && all_aligned(4 * sizeof(To), dst.raw()), op,
          stream);
    });
  });
}

void fill(Tensor& dst, double value) {
  FATHOM_CHECK(dst.device().is_cuda(), "fill: ", describe(dst), " is not on a CUDA device");
  cudaStream_t stream = stream_for(dst.device());
  dispatch_any(dst.dtype(), [&]<typename T>() {
    constexpr int N = 16 / sizeof(T) > 8 ? 8 : int(16 / sizeof(T));
    run_map<N>(dst.numel(), aligned_to(16, dst.raw()), FillOp<T>{static_cast<T*>(dst.raw()), value}, stream);
  });
}

}  // namespace fathom::cuda
