// CUDA kernels of the FP8 scaling ops. The amax is a max over |x|'s bit patterns (a non-negative float's
// bits order like its value, and a positive NaN's sit above +Inf's), so one integer atomicMax per block
// reduces it and NaN propagates. The casts read the amax from device memory and compute the scale
// themselves (fp8_scale.h), converting with CUDA's satfinite intrinsic: no host sync anywhere.
//
// They are bandwidth-bound, so each has a packed form that moves 16-byte loads and 8- or 16-byte stores,
// several loads in flight per thread, taken whenever the pointers are aligned (and, for the
// cast-transpose, the width is a multiple of 8, as every FP8 linear's is); an element-at-a-time form
// handles the rest with the same arithmetic, so both give the same bytes.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>

#include "core/fp8.h"
#include "kernels/fp8/fp8.h"
#include "kernels/fp8/fp8_scale.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kAmaxThreads = 512;
constexpr int kCastThreads = 256;
constexpr int kUnroll = 4;  // packs each thread of the packed amax and cast loads before using any

// The element-at-a-time cast-transpose: one 32 x 32 tile per block of 32 x 8 threads.
constexpr int kTile = 32;
constexpr int kTileRows = 8;
// The packed cast-transpose: one 128-row x 64-column tile per block of 256 threads. A thread converts
// groups of 8 elements of a row (a 16-byte load of bf16), then writes 16 rows of one column of the
// transpose (a 16-byte store), so 8 threads write one transposed row's 128 contiguous bytes.
constexpr int kPackedRows = 128;
constexpr int kPackedCols = 64;
constexpr int kPackedThreads = 256;
constexpr int kGroup = 8;
constexpr int kRowsPerStore = 16;
// Where column j (a multiple of 4 in the row phase) of tile row i sits in shared memory: each 16-row chunk
// is rotated by 4 more bytes, so the 8 chunks a warp reads down one column fall in 8 different banks.
__device__ __forceinline__ int swizzled(int i, int j) { return (j + 4 * (i / kRowsPerStore)) % kPackedCols; }

__device__ __forceinline__ unsigned int abs_bits(float v) { return __float_as_uint(fabsf(v)); }

// The elements of one 16-byte load.
template <typename T>
constexpr int kPack = 16 / int(sizeof(T));

template <typename T>
__device__ __forceinline__ unsigned int pack_amax(const Pack<T, kPack<T>>& pack, unsigned int best) {
#pragma unroll
  for (int j = 0; j < kPack<T>; ++j) best = max(best, abs_bits(to_float(pack.v[j])));
  return best;
}

// kPacked: x is 16-byte aligned and read kPack<T> elements at a time, kUnroll loads in flight per
// thread; the tail past the last whole pack (or all of x when unaligned) one element at a time.
template <typename T, bool kPacked>
__global__ void __launch_bounds__(kAmaxThreads)
    amax_kernel(const T* __restrict__ x, int64_t n, unsigned int* amax_bits) {
  unsigned int best = 0;
  const int64_t stride = int64_t(gridDim.x) * kAmaxThreads;
  const int64_t first = int64_t(blockIdx.x) * kAmaxThreads + threadIdx.x;
  int64_t tail = 0;
  if constexpr (kPacked) {
    constexpr int N = kPack<T>;
    const int64_t packs = n / N;
    int64_t p = first;
    for (; p + (kUnroll - 1) * stride < packs; p += kUnroll * stride) {
      Pack<T, N> v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load_pack<N>(x + (p + u * stride) * N);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) best = pack_amax(v[u], best);
    }
    for (; p < packs; p += stride) best = pack_amax(load_pack<N>(x + p * N), best);
    tail = packs * N;
  }
  for (int64_t i = tail + first; i < n; i += stride) best = max(best, abs_bits(to_float(x[i])));
  __shared__ unsigned int scratch[32];
  best = block_max(best, scratch);
  if (threadIdx.x == 0 && best != 0) atomicMax(amax_bits, best);
}

__device__ __forceinline__ __nv_fp8_interpretation_t interpretation(DType format) {
  return format == DType::e4m3 ? __NV_E4M3 : __NV_E5M2;
}

__device__ __forceinline__ uint8_t to_fp8(float v, float scale, __nv_fp8_interpretation_t kind) {
  return __nv_cvt_float_to_fp8(__fmul_rn(v, scale), __NV_SATFINITE, kind);
}

// Block 0's first thread writes the scale's inverse (every block computes the same scale).
__device__ __forceinline__ float scale_of(const float* amax, float fp8_max, float* scale_inv) {
  const float scale = fp8_scale_from_amax(*amax, fp8_max);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = fp8_scale_inv(scale);
  return scale;
}

// kGroup consecutive elements at p (16-byte aligned) as floats: one 16-byte load of bf16, two of f32.
template <typename T>
struct Group {
  Pack<T, kPack<T>> packs[kGroup / kPack<T>];
};
template <typename T>
__device__ __forceinline__ Group<T> load_group(const T* p) {
  Group<T> g;
#pragma unroll
  for (int k = 0; k < kGroup / kPack<T>; ++k) g.packs[k] = load_pack<kPack<T>>(p + k * kPack<T>);
  return g;
}
template <typename T>
__device__ __forceinline__ Pack<uint8_t, kGroup> group_to_fp8(const Group<T>& g, float scale,
                                                              __nv_fp8_interpretation_t kind) {
  Pack<uint8_t, kGroup> codes;
#pragma unroll
  for (int k = 0; k < kGroup / kPack<T>; ++k)
#pragma unroll
    for (int j = 0; j < kPack<T>; ++j) codes.v[k * kPack<T> + j] = to_fp8(to_float(g.packs[k].v[j]), scale, kind);
  return codes;
}

// kPacked: x 16-byte and out 8-byte aligned; groups of kGroup elements, kUnroll groups in flight per
// thread, then the tail one element at a time.
template <typename T, bool kPacked>
__global__ void __launch_bounds__(kCastThreads)
    cast_kernel(const T* __restrict__ x, int64_t n, const float* amax, DType format, float fp8_max,
                uint8_t* __restrict__ out, float* scale_inv) {
  const float scale = scale_of(amax, fp8_max, scale_inv);
  const __nv_fp8_interpretation_t kind = interpretation(format);
  const int64_t stride = int64_t(gridDim.x) * kCastThreads;
  const int64_t first = int64_t(blockIdx.x) * kCastThreads + threadIdx.x;
  int64_t tail = 0;
  if constexpr (kPacked) {
    const int64_t groups = n / kGroup;
    int64_t g = first;
    for (; g + (kUnroll - 1) * stride < groups; g += kUnroll * stride) {
      Group<T> v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load_group(x + (g + u * stride) * kGroup);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        store_pack<kGroup>(out + (g + u * stride) * kGroup, group_to_fp8(v[u], scale, kind));
    }
    for (; g < groups; g += stride)
      store_pack<kGroup>(out + g * kGroup, group_to_fp8(load_group(x + g * kGroup), scale, kind));
    tail = groups * kGroup;
  }
  for (int64_t i = tail + first; i < n; i += stride) out[i] = to_fp8(to_float(x[i]), scale, kind);
}

// One 32 x 32 tile per block: rows are read (and, when out is set, written) along the columns, then the
// tile goes through shared memory so the transpose is written along its rows too. Tiles past `rows`
// (up to the padded width of the transpose) write zeros there.
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    cast_transpose_kernel(const T* x, int64_t rows, int64_t cols, int64_t padded, const float* amax, DType format,
                          float fp8_max, uint8_t* out, uint8_t* out_t, float* scale_inv) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float scale = scale_of(amax, fp8_max, scale_inv);
  const __nv_fp8_interpretation_t kind = interpretation(format);
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = row0 + i, c = col0 + threadIdx.x;
    uint8_t code = 0;
    if (r < rows && c < cols) {
      code = to_fp8(to_float(x[r * cols + c]), scale, kind);
      if (out) out[r * cols + c] = code;
    }
    tile[i][threadIdx.x] = code;
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t c = col0 + i, r = row0 + threadIdx.x;
    if (c < cols && r < padded) out_t[c * padded + r] = tile[threadIdx.x][i];
  }
}

// The packed cast-transpose (see kPackedRows): cols a multiple of kGroup, x 16-byte aligned, out 8-byte and
// out_t 16-byte aligned (padded is a multiple of 16). A group of 8 columns, like a 16-row chunk of the
// padded transpose, lies wholly inside the tensor or wholly outside it; rows past `rows` are zeros.
template <typename T>
__global__ void __launch_bounds__(kPackedThreads)
    cast_transpose_packed_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t padded, const float* amax,
                                 DType format, float fp8_max, uint8_t* __restrict__ out, uint8_t* __restrict__ out_t,
                                 float* scale_inv) {
  __shared__ __align__(16) uint8_t tile[kPackedRows][kPackedCols];
  const float scale = scale_of(amax, fp8_max, scale_inv);
  const __nv_fp8_interpretation_t kind = interpretation(format);
  const int64_t row0 = int64_t(blockIdx.y) * kPackedRows, col0 = int64_t(blockIdx.x) * kPackedCols;
  constexpr int kGroupsPerRow = kPackedCols / kGroup;
  constexpr int kLoads = kPackedRows * kGroupsPerRow / kPackedThreads;
  Group<T> v[kLoads];
  bool inside[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {  // every load first, so they are all in flight together
    const int item = threadIdx.x + k * kPackedThreads;
    const int64_t r = row0 + item / kGroupsPerRow, c = col0 + (item % kGroupsPerRow) * kGroup;
    inside[k] = r < rows && c < cols;
    if (inside[k]) v[k] = load_group(x + r * cols + c);
  }
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int item = threadIdx.x + k * kPackedThreads;
    const int i = item / kGroupsPerRow, j = (item % kGroupsPerRow) * kGroup;
    Pack<uint8_t, kGroup> codes{};
    if (inside[k]) {
      codes = group_to_fp8(v[k], scale, kind);
      if (out) store_pack<kGroup>(out + (row0 + i) * cols + col0 + j, codes);
    }
    uint32_t words[2];
    memcpy(words, codes.v, sizeof(words));
    *reinterpret_cast<uint32_t*>(&tile[i][swizzled(i, j)]) = words[0];
    *reinterpret_cast<uint32_t*>(&tile[i][swizzled(i, j + 4)]) = words[1];
  }
  __syncthreads();
  constexpr int kStoresPerColumn = kPackedRows / kRowsPerStore;
#pragma unroll
  for (int item = threadIdx.x; item < kPackedCols * kStoresPerColumn; item += kPackedThreads) {
    const int j = item / kStoresPerColumn, i = (item % kStoresPerColumn) * kRowsPerStore;
    const int64_t c = col0 + j, r = row0 + i;
    if (c >= cols || r >= padded) continue;
    Pack<uint8_t, kRowsPerStore> column;
#pragma unroll
    for (int k = 0; k < kRowsPerStore; ++k) column.v[k] = tile[i + k][swizzled(i, j)];  // i + k: the same chunk
    store_pack<kRowsPerStore>(out_t + c * padded + r, column);
  }
}

// One full wave of a grid-stride kernel (as many blocks as fit on the device at once): more blocks would
// only queue behind it, and a partial second wave leaves SMs idle at the end. The blocks per SM are asked
// once per kernel (each has one block size): every GPU of a process is taken to be of one architecture.
template <auto kernel>
unsigned wave_blocks(int threads, Device device) {
  static const int per_sm = [threads] {
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
    return std::max(blocks, 1);
  }();
  return unsigned(per_sm * device_properties(device.index).multiProcessorCount);
}

}  // namespace

Tensor fp8_amax(const Tensor& x) {
  Tensor amax = Tensor::zeros({1}, DType::f32, x.device());
  if (x.numel() == 0) return amax;
  dispatch_device_float("fp8_amax", x.dtype(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.raw());
    auto* bits = static_cast<unsigned int*>(amax.raw());
    cudaStream_t stream = stream_for(x.device());
    if (aligned_to(16, xp)) {
      const unsigned blocks = grid_for(x.numel() / (kPack<T> * kUnroll), kAmaxThreads,
                                       wave_blocks<amax_kernel<T, true>>(kAmaxThreads, x.device()));
      amax_kernel<T, true><<<blocks, kAmaxThreads, 0, stream>>>(xp, x.numel(), bits);
    } else {
      amax_kernel<T, false>
          <<<grid_for(x.numel(), kAmaxThreads * 8, 2048), kAmaxThreads, 0, stream>>>(xp, x.numel(), bits);
    }
    CUDA_CHECK_LAUNCH();
  });
  return amax;
}

void fp8_cast(const Tensor& x, const Tensor& amax, Tensor& data, Tensor& transposed, Tensor& scale_inv) {
  const DType format = data.defined() ? data.dtype() : transposed.dtype();
  const float format_max = fp8_max(format);
  const int64_t rows = x.dim(0), cols = x.dim(1);
  cudaStream_t stream = stream_for(x.device());
  const float* amax_p = static_cast<const float*>(amax.raw());
  float* scale_inv_p = static_cast<float*>(scale_inv.raw());
  uint8_t* out = data.defined() ? static_cast<uint8_t*>(data.raw()) : nullptr;
  uint8_t* out_t = transposed.defined() ? static_cast<uint8_t*>(transposed.raw()) : nullptr;
  dispatch_device_float("fp8_cast", x.dtype(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.raw());
    const bool out_aligned = !out || aligned_to(kGroup, out);
    if (!out_t) {
      if (aligned_to(16, xp) && out_aligned) {
        const unsigned blocks = grid_for(x.numel() / (kGroup * kUnroll), kCastThreads,
                                         wave_blocks<cast_kernel<T, true>>(kCastThreads, x.device()));
        cast_kernel<T, true>
            <<<blocks, kCastThreads, 0, stream>>>(xp, x.numel(), amax_p, format, format_max, out, scale_inv_p);
      } else {
        cast_kernel<T, false><<<grid_for(x.numel(), kCastThreads * 4), kCastThreads, 0, stream>>>(
            xp, x.numel(), amax_p, format, format_max, out, scale_inv_p);
      }
    } else {
      const int64_t padded = transposed.dim(1);
      // padded % 16: the 16-row chunks of the transpose end at padded and their stores stay aligned.
      if (cols % kGroup == 0 && padded % kRowsPerStore == 0 && aligned_to(16, xp) && out_aligned &&
          aligned_to(kRowsPerStore, out_t)) {
        FATHOM_CHECK((padded + kPackedRows - 1) / kPackedRows <= 65535, "fp8_cast_transpose: ", rows,
                     " rows exceed the grid");
        const dim3 grid(unsigned(std::max<int64_t>((cols + kPackedCols - 1) / kPackedCols, 1)),
                        unsigned(std::max<int64_t>((padded + kPackedRows - 1) / kPackedRows, 1)));
        cast_transpose_packed_kernel<T><<<grid, kPackedThreads, 0, stream>>>(xp, rows, cols, padded, amax_p, format,
                                                                             format_max, out, out_t, scale_inv_p);
      } else {
        FATHOM_CHECK((padded + kTile - 1) / kTile <= 65535, "fp8_cast_transpose: ", rows, " rows exceed the grid");
        const dim3 grid(unsigned(std::max<int64_t>((cols + kTile - 1) / kTile, 1)),
                        unsigned(std::max<int64_t>((padded + kTile - 1) / kTile, 1)));
        cast_transpose_kernel<T><<<grid, dim3(kTile, kTileRows), 0, stream>>>(xp, rows, cols, padded, amax_p, format,
                                                                              format_max, out, out_t, scale_inv_p);
      }
    }
    CUDA_CHECK_LAUNCH();
  });
}

void check_fp8_device(Device device) {
  const cudaDeviceProp& p = device_properties(device.index);
  FATHOM_CHECK(p.major * 10 + p.minor >= 89, "train.precision fp8 needs FP8 tensor cores (compute capability 8.9 or ",
               "newer: Ada, Hopper, Blackwell); ", device.str(), " (", p.name, ") has compute capability ", p.major,
               ".", p.minor, ". Use train.precision: bf16 on this GPU");
}

}  // namespace fathom::cuda
