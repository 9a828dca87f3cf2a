// Device pieces of the mma.sync DSLA backward kernels (dsla_query_key_grads.cu, dsla_value_grads.cu): the
// block shape (4 D threads; warp tiles of 16 rows x 32 columns, four row sub-blocks of 16), and both
// states' cumulative log2 gates of a chunk, loaded asynchronously and scanned in place.
#pragma once
#include "kernels/attention/attention_mma.cuh"
#include "kernels/dsla/dsla_launch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda::dsla_mma {

using flash::bf16_t;

constexpr int kChunk = 64, kSub = 16;

template <int D>
struct Shape {
  static constexpr int threads = 4 * D, warps = threads / 32;
  static constexpr int warps_per_row = D / 32;  // warps per 16-row sub-block: 32 columns each
  static constexpr int ld_gates = D + 4;        // fp32 gate rows: fragment reads of 4 rows hit distinct banks
  static constexpr int gates_bytes = kChunk * ld_gates * 4;
};

using ScoreTile = flash::SwizzledTile<kChunk>;  // [64][64] bf16: D = do v^T, or the kept scores

__device__ __forceinline__ float bf(bf16_t x) { return __bfloat162float(x); }

// A bf16x2 fragment register times two factors (low half first).
__device__ __forceinline__ uint32_t scaled(uint32_t pair, float lo, float hi) {
  const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pair));
  return flash::pack_bf16(x.x * lo, x.y * hi);
}

// acc[2 np] and acc[2 np + 1] += a times the B fragments b of two n-tiles (as load_b / load_b_trans give them).
template <int N>
__device__ __forceinline__ void mma_pair(float (&acc)[N][4], int np, const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  flash::mma_16816(acc[2 * np], a, b[0], b[1]);
  flash::mma_16816(acc[2 * np + 1], a, b[2], b[3]);
}

// Issues the copies of the chunk's rows [0, L) of each state's gates (fp32 [B, T, H, D], row 0 at
// g + first * D, rows H D apart) into gates[s] ([64][ld_gates]); rows past L are zeros.
template <int D, int NS>
__device__ __forceinline__ void load_gates_async(float* gates, const float* g1, const float* g2, int64_t first, int L,
                                                 int H) {
  using Sh = Shape<D>;
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    const float* src = (s == 0 ? g1 : g2) + first * D;
    const uint32_t dst = flash::smem_addr(gates + s * kChunk * Sh::ld_gates);
    for (int i = threadIdx.x; i < kChunk * D / 4; i += Sh::threads) {
      const int r = i / (D / 4), ch = i % (D / 4);
      flash::cp_async_16(dst + (r * Sh::ld_gates + ch * 4) * 4, r < L ? src + int64_t(r) * H * D + ch * 4 : src, r < L);
    }
  }
}

// In place, once the gates have landed: each state's gates -> their cumulative sums over the chunk in log2
// units. Thread (I, c) = (threadIdx.x / D, threadIdx.x % D) scans rows 16 I .. of column c; `scratch` holds
// NS x threads floats. Has one barrier inside; the caller puts one between this and the sums' readers.
template <int D, int NS>
__device__ __forceinline__ void cumulate_gates(float* gates, float* scratch) {
  using Sh = Shape<D>;
  constexpr int LG = Sh::ld_gates;
  const int I = threadIdx.x / D, c = threadIdx.x % D;
  float x[NS][kSub];
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    const float* col = gates + s * kChunk * LG + kSub * I * LG + c;
#pragma unroll
    for (int r = 0; r < kSub; ++r) x[s][r] = col[r * LG] * flash::kLog2e + (r > 0 ? x[s][r - 1] : 0.0f);
    scratch[s * Sh::threads + I * D + c] = x[s][kSub - 1];
  }
  __syncthreads();
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    float before = 0.0f;
#pragma unroll
    for (int p = 0; p < 3; ++p) before += p < I ? scratch[s * Sh::threads + p * D + c] : 0.0f;
    float* col = gates + s * kChunk * LG + kSub * I * LG + c;
#pragma unroll
    for (int r = 0; r < kSub; ++r) col[r * LG] = x[s][r] + before;
  }
}

// The weight of state s: gamma, 1 - gamma for two states with gamma; 1 otherwise.
template <bool TWO>
__device__ __forceinline__ float state_weight(const float* gamma, int h, int s) {
  return TWO && gamma != nullptr ? (s == 0 ? gamma[h] : 1.0f - gamma[h]) : 1.0f;
}

// Launches kernel(a) with `bytes` of shared memory over the grid (chunks, query heads, batch), 4 D threads a block.
template <int D, typename Kernel>
void launch_per_chunk(Kernel kernel, int bytes, const DslaBackwardArgs& a, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<dim3(unsigned(a.N), unsigned(a.H), unsigned(a.B)), Shape<D>::threads, bytes, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::cuda::dsla_mma
