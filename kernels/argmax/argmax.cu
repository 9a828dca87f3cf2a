// One block per row: each thread keeps its best (value, index) over a strided sweep, then the block
// reduces the pairs in shared memory; the lower index wins ties, as on the CPU.
#include <cfloat>

#include "kernels/argmax/argmax.h"
#include "kernels/runtime/device_errors.cuh"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/float_dispatch.h"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

constexpr int kThreads = 1024;

__device__ bool better(float v, int i, float best_v, int best_i) { return v > best_v || (v == best_v && i < best_i); }

template <typename T>
__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(const T* x, int64_t n, int32_t* out) {
  __shared__ float vs[kThreads];
  __shared__ int is[kThreads];
  const T* row = x + int64_t(blockIdx.x) * n;
  float best_v = -INFINITY;
  int best_i = -1;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = to_float(row[i]);
    if (v == v && (best_i < 0 || better(v, int(i), best_v, best_i))) best_v = v, best_i = int(i);
  }
  vs[threadIdx.x] = best_v;
  is[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float v = vs[threadIdx.x + stride];
      const int i = is[threadIdx.x + stride];
      if (i >= 0 && (is[threadIdx.x] < 0 || better(v, i, vs[threadIdx.x], is[threadIdx.x])))
        vs[threadIdx.x] = v, is[threadIdx.x] = i;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = is[0] < 0 ? 0 : is[0];
}

}  // namespace

Tensor argmax_rows(const Tensor& x) {
  Tensor out = Tensor::empty({x.dim(0)}, DType::i32, x.device());
  if (x.dim(0) == 0) return out;
  FATHOM_CHECK(x.dim(0) <= 2147483647, "argmax_rows: ", x.dim(0), " rows exceed the grid");
  dispatch_device_float("argmax_rows", x.dtype(), [&]<typename T>() {
    argmax_rows_kernel<T><<<unsigned(x.dim(0)), kThreads, 0, stream_for(x.device())>>>(
        static_cast<const T*>(x.raw()), x.dim(1), static_cast<int32_t*>(out.raw()));
    CUDA_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace fathom::cuda
