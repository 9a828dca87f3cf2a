// Device-side building blocks shared by the kernels: element types, conversions to and from the f32
// (or f64) arithmetic type, packed loads and stores, and warp/block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/runtime/argument_checks.h"  // aligned_to, all_aligned: choosing packed kernels

namespace fathom::cuda {

// The device element type of a fathom dtype.
template <DType D>
struct DeviceType;
template <>
struct DeviceType<DType::f32> {
  using type = float;
};
template <>
struct DeviceType<DType::bf16> {
  using type = __nv_bfloat16;
};
template <>
struct DeviceType<DType::f16> {
  using type = __half;
};
template <>
struct DeviceType<DType::f64> {
  using type = double;
};
template <>
struct DeviceType<DType::i32> {
  using type = int32_t;
};
template <>
struct DeviceType<DType::i64> {
  using type = int64_t;
};
template <>
struct DeviceType<DType::u8> {
  using type = uint8_t;
};

// Every element type to float (the arithmetic type of the kernels) and back, rounding to nearest.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// N consecutive elements moved as one access (N * sizeof(T) bytes, at most 16); callers check that
// the address is aligned to the pack size.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <int N, typename T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}
template <int N, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& pack) {
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

// The logistic function as SwiGLU computes it: one definition, so that every kernel gating by it (the SwiGLU
// kernel, the skinny GEMM's gated epilogue, the persistent decoding kernel) rounds alike and their outputs agree bit
// for bit.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// SwiGLU of one gate and up value, silu(g) * u, for the same reason in one place.
__device__ __forceinline__ float swiglu_value(float g, float u) { return g * sigmoid(g) * u; }

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <typename T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread. The
// order of additions is fixed by the launch shape, so results repeat bit for bit. `scratch` holds 32
// values; the call ends with a barrier so scratch can be reused at once.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

template <typename T>
__device__ T block_max(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T m = lane < warps ? scratch[lane] : scratch[0];
  m = warp_max(m);
  __syncthreads();
  return m;
}

// Blocks for a grid-stride loop over n items with `threads` per block, capped so that one wave of
// blocks fills the device several times over without millions of tiny blocks.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 8192) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

}  // namespace fathom::cuda

namespace fathom::cuda {

// How for_each_pack_in_row and transform_row split a row [0, n) at `row`: `head` single elements up
// to the first 16-byte boundary, then `packs` packs of 16 / sizeof(T) elements, then single elements.
struct RowPacks {
  int64_t head, packs;
};
template <typename T>
__device__ __forceinline__ RowPacks row_packs(const T* row, int64_t n) {
  constexpr int N = 16 / sizeof(T);
  const int64_t misalign = int64_t(reinterpret_cast<uintptr_t>(row) % 16) / int64_t(sizeof(T));
  const int64_t head = min(n, misalign == 0 ? int64_t(0) : N - misalign);
  return {head, (n - head) / N};
}

// Walks packs [0, packs) strided over the block's threads, kBatch at a time per thread: every load of
// a batch is issued before any is used, so each thread keeps kBatch 16-byte reads in flight (a loop
// that loads, uses and stores one pack at a time keeps one: the compiler cannot move a read above a
// store that might alias it). Each thread still sees its packs in ascending order, so reductions over
// them repeat bit for bit. load(p) returns pack p; use(pack, p) consumes it.
template <int kBatch, typename Load, typename Use>
__device__ __forceinline__ void for_each_pack_batched(int64_t packs, Load&& load, Use&& use) {
  using P = decltype(load(int64_t(0)));
  const int64_t stride = blockDim.x;
  int64_t p = threadIdx.x;
  for (; p + (kBatch - 1) * stride < packs; p += kBatch * stride) {
    P batch[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) batch[b] = load(p + b * stride);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) use(batch[b], p + b * stride);
  }
  for (; p < packs; p += stride) use(load(p), p);
}
constexpr int kRowLoadBatch = 4;

// Calls f(pack, first_index) over a row [0, n) read by the block's threads (strided): the part
// between the row's first and last 16-byte boundaries as Pack<T, 16 / sizeof(T)>, the ragged ends
// one element at a time (Pack<T, 1>); so rows of any length and alignment (a vocabulary of 50257)
// still stream at full width.
template <typename T, typename F>
__device__ __forceinline__ void for_each_raw_pack_in_row(const T* row, int64_t n, F&& f) {
  constexpr int N = 16 / sizeof(T);
  const auto [head, packs] = row_packs(row, n);
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) f(load_pack<1>(row + i), i);
  for_each_pack_batched<kRowLoadBatch>(
      packs, [&](int64_t p) { return load_pack<N>(row + head + p * N); },
      [&](const Pack<T, N>& pack, int64_t p) { f(pack, head + p * N); });
  for (int64_t i = head + packs * N + threadIdx.x; i < n; i += blockDim.x) f(load_pack<1>(row + i), i);
}

// The same walk with the values as floats: f(values, first_index), values float[16 / sizeof(T)] or
// float[1].
template <typename T, typename F>
__device__ __forceinline__ void for_each_pack_in_row(const T* row, int64_t n, F&& f) {
  for_each_raw_pack_in_row(row, n, [&]<int M>(const Pack<T, M>& pack, int64_t i) {
    float v[M];
#pragma unroll
    for (int k = 0; k < M; ++k) v[k] = to_float(pack.v[k]);
    f(v, i);
  });
}

// out[i] = f(in[i], i) over a row, packed like for_each_pack_in_row when both rows share their offset
// within 16 bytes (always true in place, and for same-dtype rows of fresh allocations).
template <typename T, typename F>
__device__ __forceinline__ void transform_row(const T* in, T* out, int64_t n, F&& f) {
  constexpr int N = 16 / sizeof(T);
  if (reinterpret_cast<uintptr_t>(in) % 16 != reinterpret_cast<uintptr_t>(out) % 16) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = from_float<T>(f(to_float(in[i]), i));
    return;
  }
  const auto [head, packs] = row_packs(in, n);
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) out[i] = from_float<T>(f(to_float(in[i]), i));
  for_each_pack_batched<kRowLoadBatch>(
      packs, [&](int64_t p) { return load_pack<N>(in + head + p * N); },
      [&](const Pack<T, N>& v, int64_t p) {
        const int64_t i = head + p * N;
        Pack<T, N> r;
#pragma unroll
        for (int k = 0; k < N; ++k) r.v[k] = from_float<T>(f(to_float(v.v[k]), i + k));
        store_pack<N>(out + i, r);
      });
  for (int64_t i = head + packs * N + threadIdx.x; i < n; i += blockDim.x)
    out[i] = from_float<T>(f(to_float(in[i]), i));
}

}  // namespace fathom::cuda
