// Device pieces shared by the chunked DSLA kernels (dsla_forward.cu, dsla_backward.cu): the GPU chunk,
// loading a chunk's rows into shared memory, and the per-chunk cumulative log gates.
//
// The kernels keep the states in fp32 shared memory and walk the sequence chunk by chunk. A chunk is
// kChunk = 16 tokens (the CPU reference uses 64; the algorithm is the same): its cumulative gates b
// restart at 0, are kept in log2 units, and every intra-chunk ratio e^{b_t - b_j} is formed from the
// difference b_t - b_j (never as e^{b_t} e^{-b_j}), so no gate strength overflows. Rows past the end
// of the sequence are loaded as zeros: zero gates leave b constant, so b[kChunk - 1] is the chunk's
// total gate whatever its length, and zero k, v, do contribute nothing.
#pragma once
#include <cstdint>

#include "kernels/runtime/device_math.cuh"

namespace fathom::cuda::dsla {

constexpr int kChunk = 16;
constexpr int kThreads = 256;  // kChunk * kChunk: one thread per (t, j) pair of a chunk's score matrix
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kThreads == kChunk * kChunk);

// Copies columns [c0, c0 + W) of rows [t0, t0 + L) of `head` in a [B, T, heads, D] tensor into
// dst[kChunk][W + pad] as floats times `mul`; rows past L are zeros.
template <int W, int STRIDE, typename T>
__device__ __forceinline__ void load_chunk(float* dst, const T* src, int64_t b, int64_t t0, int L, int64_t T_len,
                                           int heads, int head, int D, int c0, float mul = 1.0f) {
  for (int i = threadIdx.x; i < kChunk * W; i += kThreads) {
    const int t = i / W, c = i % W;
    dst[t * STRIDE + c] =
        t < L ? mul * to_float(src[((b * T_len + t0 + t) * heads + head) * int64_t(D) + c0 + c]) : 0.0f;
  }
}

// In place: rows of log2 gates [kChunk][STRIDE] (W columns) -> their running sums over the chunk.
template <int W, int STRIDE>
__device__ __forceinline__ void cumulate_gates(float* gates, int states) {
  for (int i = threadIdx.x; i < states * W; i += kThreads) {
    float* col = gates + (i / W) * kChunk * STRIDE + i % W;
    float run = 0.0f;
#pragma unroll
    for (int t = 0; t < kChunk; ++t) {
      run += col[t * STRIDE];
      col[t * STRIDE] = run;
    }
  }
}

// The number of valid rows of the chunk starting at t0.
__device__ __forceinline__ int chunk_rows(int64_t t0, int64_t T_len) {
  return int(T_len - t0 < kChunk ? T_len - t0 : kChunk);
}

}  // namespace fathom::cuda::dsla
