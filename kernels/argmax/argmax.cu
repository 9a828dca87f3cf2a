// The index of each row's largest value, in one launch at every shape. A row is cut into chunks that
// spread the rows over the SMs (greedy decoding takes one to 32 rows of a 100K-wide vocabulary, which
// one block per row reads at a fraction of the bandwidth): each CTA finds the best (value, index) of its
// chunk with 16-byte loads, all in flight at once, and writes it as a partial; the row's last CTA to
// finish (a count in grid_counters, runtime.h) reduces the partials, writes the answer and sets the
// count back to zero. "Best" is a total order (the larger value, then the lower index; NaN never), so
// the answer does not depend on the order the CTAs finish in, and equals the CPU's.
#include <algorithm>
#include <cfloat>

#include "kernels/argmax/argmax.h"
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSlots = 4;              // 16-byte loads in flight per thread
constexpr int kChunksPerRowMax = 256;  // the partials' room per row

struct Best {
  float v;
  int i;  // -1: nothing yet (or only NaNs)
};

__device__ __forceinline__ void take(Best& best, float v, int i) {
  if (v == v && (best.i < 0 || v > best.v || (v == best.v && i < best.i))) best = {v, i};
}
__device__ __forceinline__ void take(Best& best, const Best& other) {
  if (other.i >= 0) take(best, other.v, other.i);
}

// The block's best, to every thread.
__device__ Best block_best(Best best, Best* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    take(best, Best{__shfl_xor_sync(0xffffffffu, best.v, offset), __shfl_xor_sync(0xffffffffu, best.i, offset)});
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = best;
  __syncthreads();
  Best all = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) take(all, scratch[w]);
  return all;
}

// Grid (chunks, rows): CTA c of row r reads x[r, c * chunk .. (c + 1) * chunk); with one chunk a row,
// grid (rows). kWidth elements per load: 16 / sizeof(T) where rows are aligned whole vectors, else 1.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads)
    argmax_rows_kernel(const T* x, int64_t n, int64_t chunk, int chunks, Best* partials, int* counters, int32_t* out) {
  __shared__ Best scratch[kWarps];
  __shared__ bool last;
  follow_previous_grid();  // dependent_launch.cuh
  const int64_t row = chunks == 1 ? int64_t(blockIdx.x) : int64_t(blockIdx.y);
  const int c = chunks == 1 ? 0 : int(blockIdx.x);
  const T* x_row = x + int64_t(row) * n;
  const int64_t begin = int64_t(c) * chunk, end = min(n, begin + chunk);
  Best best{-INFINITY, -1};
  for (int64_t base = begin + int64_t(threadIdx.x) * kWidth; base < end; base += int64_t(kSlots) * kThreads * kWidth) {
    Pack<T, kWidth> p[kSlots];
#pragma unroll
    for (int u = 0; u < kSlots; ++u) {
      const int64_t at = base + int64_t(u) * kThreads * kWidth;
      if (at < end) p[u] = load_pack<kWidth>(x_row + at);
    }
#pragma unroll
    for (int u = 0; u < kSlots; ++u) {
      const int64_t at = base + int64_t(u) * kThreads * kWidth;
      if (at >= end) continue;
#pragma unroll
      for (int j = 0; j < kWidth; ++j) take(best, to_float(p[u].v[j]), int(at + j));
    }
  }
  best = block_best(best, scratch);
  if (chunks == 1) {
    if (threadIdx.x == 0) out[row] = best.i < 0 ? 0 : best.i;
    return;
  }
  // Publish the partial, then count this CTA; the last one of the row reads every partial.
  if (threadIdx.x == 0) {
    partials[int64_t(row) * chunks + c] = best;
    __threadfence();
    last = atomicAdd(counters + row, 1) == chunks - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  Best mine{-INFINITY, -1};
  // Through L2 (__ldcg): the other CTAs' partials were written from other SMs.
  for (int p = int(threadIdx.x); p < chunks; p += kThreads) {
    const Best* from = partials + int64_t(row) * chunks + p;
    take(mine, Best{__ldcg(&from->v), __ldcg(&from->i)});
  }
  __syncthreads();  // scratch is reused
  mine = block_best(mine, scratch);
  if (threadIdx.x == 0) {
    out[row] = mine.i < 0 ? 0 : mine.i;
    counters[row] = 0;
  }
}

}  // namespace

void argmax_rows(const Tensor& x, Tensor& out) {
  const int64_t rows = x.dim(0), n = x.dim(1);
  if (rows == 0) return;
  FATHOM_CHECK(rows <= 2147483647, "argmax_rows: ", rows, " rows exceed the grid");  // n: argmax.cpp checks it
  // Chunks: about two CTAs per SM over all rows, none smaller than one round of loads, one where the
  // rows outnumber the counters (each row then reads its whole row in one CTA).
  const int sms = device_properties(x.device().index).multiProcessorCount;
  const int64_t round = int64_t(kThreads) * kSlots * 8;
  int64_t chunks = std::min<int64_t>({(2 * sms + rows - 1) / rows, (n + round - 1) / round, kChunksPerRowMax});
  if (rows > kGridCounters) chunks = 1;  // kGridCounters is also under the grid's 65535 rows
  const int64_t chunk = ((n + chunks - 1) / chunks + 7) / 8 * 8;
  chunks = (n + chunk - 1) / chunk;
  Tensor partials = Tensor::empty({chunks > 1 ? rows * chunks * int64_t(sizeof(Best)) : 0}, DType::u8, x.device());
  dispatch_device_float("argmax_rows", x.dtype(), [&]<typename T>() {
    constexpr int kVector = 16 / sizeof(T);
    const auto launch = [&](auto kernel) {
      const dim3 grid = chunks == 1 ? dim3(unsigned(rows)) : dim3(unsigned(chunks), unsigned(rows));
      launch_kernel(kernel, grid, dim3(kThreads), 0, stream_for(x.device()), static_cast<const T*>(x.raw()), n, chunk,
                    int(chunks), reinterpret_cast<Best*>(partials.raw()), grid_counters(x.device().index),
                    static_cast<int32_t*>(out.raw()));
    };
    if (n % kVector == 0 && chunk % kVector == 0 && aligned_to(16, x.raw()))
      launch(argmax_rows_kernel<T, kVector>);
    else
      launch(argmax_rows_kernel<T, 1>);
  });
}

}  // namespace fathom::cuda
