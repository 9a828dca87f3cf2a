// CUDA RMSNorm over the last dimension, statistics in f32. The forward gives full-width rows of 33 to
// 256 16-byte packs (hidden sizes 264-2048 in bf16) one warp each with the row held in registers.
// Otherwise narrow rows (per-head norms, n <= 1024) get one warp each; wide rows, and full-width rows
// when there are fewer of them than SMs (decoding), one block of 256 threads. The weight gradient is deterministic:
// each block sums its fixed range of rows per column in shared memory (every column owned by one thread), writes one
// partial row, and a second kernel sums the partials in order.
#include <initializer_list>

#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rms_norm/rms_norm_math.cuh"
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxWarpRow = 1024;     // widest row a single warp handles
constexpr int64_t kMaxWidth = 32768;      // shared-memory bound of the wide backward
constexpr int kMaxBackwardBlocks = 1024;  // partial rows of the weight gradient: enough blocks to fill the device
constexpr int kRowWarps = 4;              // warps per block of the register-row forward
constexpr int kMaxRowPacks = 8;           // 16-byte packs per lane a register row holds

// Sum over the TPR threads of one row: a warp, or the whole block.
template <int TPR>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
  if constexpr (TPR == 32)
    return warp_sum(v);
  else
    return block_sum(v, scratch);
}

// Stores one pack of y = x rstd w (+ the residual's pack at the same place, where there is one).
template <int N, typename T>
__device__ __forceinline__ void store_normalized_pack(const Pack<T, N>& xv, const T* w, const T* residual, T* y,
                                                      int64_t row_offset, int64_t c, float rstd) {
  const Pack<T, N> wv = load_pack<N>(w + c);
  float add[N] = {};
  if (residual != nullptr) {
    const Pack<T, N> rv = load_pack<N>(residual + row_offset + c);
#pragma unroll
    for (int k = 0; k < N; ++k) add[k] = to_float(rv.v[k]);
  }
  Pack<T, N> out;
#pragma unroll
  for (int k = 0; k < N; ++k) out.v[k] = rms::residual_normed(add[k], xv.v[k], rstd, wv.v[k]);
  store_pack<N>(y + row_offset + c, out);
}

template <int TPR, int N, typename T>
__global__ void rms_norm_forward_kernel(const T* x, const T* w, const T* residual, T* y, float* rstd_out, int64_t rows,
                                        int64_t n, float eps) {
  follow_previous_grid();  // dependent_launch.cuh
  __shared__ float scratch[32];
  constexpr int kGroups = kThreads / TPR;
  const int group = threadIdx.x / TPR, lane = threadIdx.x % TPR;
  for (int64_t row = int64_t(blockIdx.x) * kGroups + group; row < rows; row += int64_t(gridDim.x) * kGroups) {
    const T* xr = x + row * n;
    float ss = 0;
    for (int64_t c = int64_t(lane) * N; c < n; c += TPR * N) {
      const Pack<T, N> v = load_pack<N>(xr + c);
#pragma unroll
      for (int k = 0; k < N; ++k) ss += to_float(v.v[k]) * to_float(v.v[k]);
    }
    ss = group_sum<TPR>(ss, scratch);
    const float rstd = rms::rstd(ss, n, eps);
    if (lane == 0) rstd_out[row] = rstd;
    for (int64_t c = int64_t(lane) * N; c < n; c += TPR * N)
      store_normalized_pack<N>(load_pack<N>(xr + c), w, residual, y, row * n, c, rstd);
  }
}

// dx = rstd (g w) - x rstd^3 mean(g w x); dweight partial[block] = sum over its rows of g x rstd.
// Each group's column sums sit in shared memory as [N][n / N]: element k of pack p at k * (n / N) + p,
// so the lanes of a warp, holding consecutive packs, add into consecutive banks.
template <int TPR, int N, typename T>
__global__ void rms_norm_backward_kernel(const T* dy, const T* x, const T* w, const float* rstd_in, T* dx,
                                         float* partial, int64_t rows, int64_t n, int64_t rows_per_block) {
  extern __shared__ float dw_acc[];  // [groups][N][n / N]
  __shared__ float scratch[32];
  constexpr int kGroups = kThreads / TPR;
  const int group = threadIdx.x / TPR, lane = threadIdx.x % TPR;
  float* acc = dw_acc + group * n;
  for (int64_t c = lane; c < n; c += TPR) acc[c] = 0;
  __syncthreads();  // the zeroing stride differs from the packed stride each thread owns below
  const int64_t begin = int64_t(blockIdx.x) * rows_per_block;
  const int64_t end = min(rows, begin + rows_per_block);
  for (int64_t row = begin + group; row < end; row += kGroups) {
    const T* xr = x + row * n;
    const T* gr = dy + row * n;
    const float rstd = rstd_in[row];
    float dot = 0;
    for (int64_t c = int64_t(lane) * N; c < n; c += TPR * N) {
      const Pack<T, N> xv = load_pack<N>(xr + c), gv = load_pack<N>(gr + c), wv = load_pack<N>(w + c);
#pragma unroll
      for (int k = 0; k < N; ++k) dot += to_float(gv.v[k]) * to_float(wv.v[k]) * to_float(xv.v[k]);
    }
    dot = group_sum<TPR>(dot, scratch);
    const float b = rstd * rstd * rstd * dot / float(n);
    T* dxr = dx + row * n;
    for (int64_t c = int64_t(lane) * N; c < n; c += TPR * N) {
      const Pack<T, N> xv = load_pack<N>(xr + c), gv = load_pack<N>(gr + c), wv = load_pack<N>(w + c);
      Pack<T, N> out;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float xk = to_float(xv.v[k]), gk = to_float(gv.v[k]);
        out.v[k] = from_float<T>(rstd * gk * to_float(wv.v[k]) - b * xk);
        acc[k * (n / N) + c / N] += gk * xk * rstd;
      }
      store_pack<N>(dxr + c, out);
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < n; c += kThreads) {
    float total = 0;
    for (int g = 0; g < kGroups; ++g) total += dw_acc[g * n + c % N * (n / N) + c / N];
    partial[int64_t(blockIdx.x) * n + c] = total;
  }
}

// Register rows: one warp per row, each lane holding packs p * 32 + lane (p < PACKS) of it, so x is read
// once and the row's sum needs only the warp. Rows are n <= 32 * N * PACKS wide, n a multiple of N.
template <int N, int PACKS, typename T>
__global__ void __launch_bounds__(kRowWarps * 32)
    rms_norm_forward_rows_kernel(const T* x, const T* w, const T* residual, T* y, float* rstd_out, int64_t rows,
                                 int64_t n, float eps) {
  follow_previous_grid();  // dependent_launch.cuh
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kRowWarps) {
    Pack<T, N> xv[PACKS];
    float ss = 0;
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int64_t c = int64_t(p * 32 + lane) * N;
      if (c >= n) continue;
      xv[p] = load_pack<N>(x + row * n + c);
#pragma unroll
      for (int k = 0; k < N; ++k) ss += to_float(xv[p].v[k]) * to_float(xv[p].v[k]);
    }
    ss = warp_sum(ss);
    const float rstd = rms::rstd(ss, n, eps);
    if (lane == 0) rstd_out[row] = rstd;
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int64_t c = int64_t(p * 32 + lane) * N;
      if (c >= n) continue;
      store_normalized_pack<N>(xv[p], w, residual, y, row * n, c, rstd);
    }
  }
}

// dweight[c] = sum over blocks of partial[b][c]: a 32 x 32 thread tile per 32 columns, each thread
// summing every 32nd partial row, then a fixed-order sum of the 32 lane totals.
template <typename T>
__global__ void sum_partial_rows_kernel(const float* partial, int blocks, int64_t n, T* out) {
  __shared__ float lanes[32][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float total = 0;
  if (c < n)
    for (int b = threadIdx.y; b < blocks; b += 32) total += partial[int64_t(b) * n + c];
  lanes[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    float sum = 0;
    for (int y = 0; y < 32; ++y) sum += lanes[y][threadIdx.x];
    out[c] = from_float<T>(sum);
  }
}

// One warp per row up to kMaxWarpRow wide (16-byte packs where every lane gets one, else packs of
// 4), else one block per row (16-byte packs); element-wise where the width or the addresses do not
// allow packs.
template <typename T, typename F>
void dispatch_layout(int64_t n, std::initializer_list<const void*> pointers, F&& f) {
  constexpr int kWidePack = 16 / sizeof(T);
  auto packed = [&](int pack) {
    if (n % pack != 0) return false;
    for (const void* p : pointers)
      if (!aligned_to(size_t(pack) * sizeof(T), p)) return false;
    return true;
  };
  if (n > kMaxWarpRow) {
    if (packed(kWidePack)) return f.template operator()<kThreads, kWidePack>();
    return f.template operator()<kThreads, 1>();
  }
  if (kWidePack > 4 && n >= 32 * kWidePack && packed(kWidePack)) return f.template operator()<32, kWidePack>();
  if (packed(4)) return f.template operator()<32, 4>();
  return f.template operator()<32, 1>();
}

// The forward's layouts: register rows from 33 16-byte packs up to 32 * kMaxRowPacks of them (rows_f),
// else dispatch_layout's (f). The backward keeps dispatch_layout's: holding dy and the weight-gradient
// sums in registers too took 240 registers at 2048 wide and was 1.6x slower than its block rows.
// Fewer rows than SMs (few_rows: a decoding step's batch) take a block per row instead of register
// rows, so every row's loads spread over 256 threads instead of queueing in one warp.
template <typename T, typename RowsF, typename F>
void dispatch_forward_layout(int64_t n, bool few_rows, std::initializer_list<const void*> pointers, RowsF&& rows_f,
                             F&& f) {
  constexpr int kPack = 16 / sizeof(T);
  const int64_t packs = n / kPack;
  bool packed = n % kPack == 0;
  for (const void* p : pointers) packed = packed && aligned_to(size_t(kPack) * sizeof(T), p);
  if (packed && packs > 32 && few_rows) return f.template operator()<kThreads, kPack>();
  if (packed && packs > 32 && packs <= 32 * kMaxRowPacks) {
    if (packs <= 32 * 2) return rows_f.template operator()<kPack, 2>();
    if (packs <= 32 * 4) return rows_f.template operator()<kPack, 4>();
    return rows_f.template operator()<kPack, kMaxRowPacks>();
  }
  dispatch_layout<T>(n, pointers, f);
}

// add_rms_norm: one block per row writes sum = residual + x, rounded to T as add rounds it, and
// y = sum rstd w from that rounded sum. Decoding's few rows and evaluation's many take the same simple
// pass; it replaces two (the add, then the norm re-reading the sum).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_rms_norm_forward_kernel(const T* residual, const T* x, const T* w, T* sum, T* y, float* rstd_out, int64_t rows,
                                int64_t n, float eps) {
  follow_previous_grid();  // dependent_launch.cuh
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t offset = row * n;
    float ss = 0;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
      const T s = rms::rounded_sum(residual[offset + c], x[offset + c]);
      sum[offset + c] = s;
      ss += to_float(s) * to_float(s);
    }
    ss = block_sum(ss, scratch);
    const float rstd = rms::rstd(ss, n, eps);
    if (threadIdx.x == 0) rstd_out[row] = rstd;
    // Each thread reads back the sums it wrote itself: no barrier needed.
    for (int64_t c = threadIdx.x; c < n; c += kThreads) y[offset + c] = rms::normed(sum[offset + c], rstd, w[c]);
  }
}

}  // namespace

RmsNormOutput rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& residual) {
  const int64_t n = x.dim(-1), rows = x.shape().rows();
  RmsNormOutput out{Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty({rows}, DType::f32, x.device())};
  if (x.numel() == 0) return out;
  cudaStream_t stream = stream_for(x.device());
  dispatch_device_float("rms_norm", x.dtype(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.raw());
    const T* wp = static_cast<const T*>(weight.raw());
    T* yp = static_cast<T*>(out.y.raw());
    const T* rp = residual.defined() ? static_cast<const T*>(residual.raw()) : nullptr;
    float* rstd_p = static_cast<float*>(out.rstd.raw());
    const bool few_rows = rows < device_properties(x.device().index).multiProcessorCount;
    dispatch_forward_layout<T>(
        n, few_rows, {xp, wp, yp, rp},
        [&]<int N, int PACKS>() {
          launch_kernel(rms_norm_forward_rows_kernel<N, PACKS, T>, dim3(grid_for(rows, kRowWarps, 65535)),
                        dim3(kRowWarps * 32), 0, stream, xp, wp, rp, yp, rstd_p, rows, n, float(eps));
        },
        [&]<int TPR, int N>() {
          const int64_t groups = kThreads / TPR;
          launch_kernel(rms_norm_forward_kernel<TPR, N, T>, dim3(grid_for(rows, int(groups), 65535)), dim3(kThreads), 0,
                        stream, xp, wp, rp, yp, rstd_p, rows, n, float(eps));
        });
  });
  return out;
}

AddRmsNormOutput add_rms_norm_forward(const Tensor& residual, const Tensor& x, const Tensor& weight, double eps) {
  const int64_t n = x.dim(-1), rows = x.shape().rows();
  AddRmsNormOutput out{
      Tensor::empty(x.shape(), x.dtype(), x.device()),
      {Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty({rows}, DType::f32, x.device())}};
  if (x.numel() == 0) return out;
  dispatch_device_float("add_rms_norm", x.dtype(), [&]<typename T>() {
    launch_kernel(add_rms_norm_forward_kernel<T>, dim3(grid_for(rows, 1, 65535)), dim3(kThreads), 0,
                  stream_for(x.device()), static_cast<const T*>(residual.raw()), static_cast<const T*>(x.raw()),
                  static_cast<const T*>(weight.raw()), static_cast<T*>(out.sum.raw()),
                  static_cast<T*>(out.normed.y.raw()), static_cast<float*>(out.normed.rstd.raw()), rows, n, float(eps));
  });
  return out;
}

RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               DType dweight_dtype) {
  const int64_t n = x.dim(-1), rows = x.shape().rows();
  FATHOM_CHECK(n <= kMaxWidth, "rms_norm_backward: the CUDA kernel handles rows up to ", kMaxWidth, " wide, got ", n);
  RmsNormGrads grads{Tensor::empty(x.shape(), x.dtype(), x.device()),
                     Tensor::empty(weight.shape(), dweight_dtype, weight.device())};
  if (rows == 0 || n == 0) {
    if (n > 0) grads.dweight.zero_();
    return grads;
  }
  cudaStream_t stream = stream_for(x.device());
  dispatch_device_float("rms_norm_backward", x.dtype(), [&]<typename T>() {
    const T* dyp = static_cast<const T*>(grad_y.raw());
    const T* xp = static_cast<const T*>(x.raw());
    const T* wp = static_cast<const T*>(weight.raw());
    T* dxp = static_cast<T*>(grads.dx.raw());
    dispatch_layout<T>(n, {dyp, xp, wp, dxp}, [&]<int TPR, int N>() {
      const int64_t groups = kThreads / TPR;
      // The row split depends on the shape alone, so the weight gradient's summation order repeats.
      const int blocks = int(std::min<int64_t>(kMaxBackwardBlocks, (rows + groups - 1) / groups));
      const int64_t rows_per_block = (rows + blocks - 1) / blocks;
      Tensor partial = Tensor::empty({int64_t(blocks) * n}, DType::f32, x.device());
      const size_t smem = size_t(groups * n) * sizeof(float);
      auto kernel = rms_norm_backward_kernel<TPR, N, T>;
      if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<blocks, kThreads, smem, stream>>>(dyp, xp, wp, static_cast<const float*>(rstd.raw()), dxp,
                                                 static_cast<float*>(partial.raw()), rows, n, rows_per_block);
      CUDA_CHECK_LAUNCH();
      const dim3 grid(unsigned((n + 31) / 32)), tile(32, 32);
      if (dweight_dtype == DType::f32)  // mixed precision: the fp32 sum goes out unrounded
        sum_partial_rows_kernel<float><<<grid, tile, 0, stream>>>(static_cast<const float*>(partial.raw()), blocks, n,
                                                                  static_cast<float*>(grads.dweight.raw()));
      else
        sum_partial_rows_kernel<T><<<grid, tile, 0, stream>>>(static_cast<const float*>(partial.raw()), blocks, n,
                                                              static_cast<T*>(grads.dweight.raw()));
      CUDA_CHECK_LAUNCH();
    });
  });
  return grads;
}

}  // namespace fathom::cuda
