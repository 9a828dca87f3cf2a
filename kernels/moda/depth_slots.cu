// MoDA depth-slot copies on CUDA: a slot of a depth buffer [B, T, S, Hk, d] is B*T rows of Hk*d
// elements strided by S*Hk*d. A write converts F32 activations into a BF16 buffer on the way (the
// GPU's depth stream holds bf16 values); a read converts to the dtype asked for (an fp32 gradient
// side buffer read out for a bf16 writer). Zeroing a slot range is one strided memset.
#include "kernels/moda/moda_tensor.h"
#include "kernels/runtime/argument_checks.h"
#include "kernels/runtime/device_math.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

// dst[row, col] = src[row, col] over rows * width elements, the two sides with their own row
// strides (in elements), VEC elements per thread (vector loads and stores where the caller checked
// that widths, strides and addresses allow them).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Elements {
  T v[VEC];
};

template <typename From, typename To, int VEC>
__global__ void strided_rows_kernel(const From* src, int64_t src_stride, To* dst, int64_t dst_stride, int64_t rows,
                                    int width) {
  const int chunks = width / VEC;
  const int64_t n = rows * chunks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / chunks;
    const int col = int(i - row * chunks) * VEC;
    const auto in = *reinterpret_cast<const Elements<From, VEC>*>(src + row * src_stride + col);
    Elements<To, VEC> out;
#pragma unroll
    for (int e = 0; e < VEC; ++e) out.v[e] = from_float<To>(to_float(in.v[e]));
    *reinterpret_cast<Elements<To, VEC>*>(dst + row * dst_stride + col) = out;
  }
}

template <typename From, typename To>
void copy_rows(const void* src, int64_t src_stride, void* dst, int64_t dst_stride, int64_t rows, int64_t width,
               cudaStream_t stream) {
  constexpr int kThreads = 256, kVec = 8;
  const bool vectors = width % kVec == 0 && src_stride % kVec == 0 && dst_stride % kVec == 0 &&
                       aligned_to(kVec * sizeof(From), src) && aligned_to(kVec * sizeof(To), dst);
  if (vectors) {
    strided_rows_kernel<From, To, kVec><<<grid_for(rows * width / kVec, kThreads), kThreads, 0, stream>>>(
        static_cast<const From*>(src), src_stride, static_cast<To*>(dst), dst_stride, rows, int(width));
  } else {
    strided_rows_kernel<From, To, 1><<<grid_for(rows * width, kThreads), kThreads, 0, stream>>>(
        static_cast<const From*>(src), src_stride, static_cast<To*>(dst), dst_stride, rows, int(width));
  }
  CUDA_CHECK_LAUNCH();
}

// Runs f<T>() for the element type of an F32 or BF16 tensor.
template <typename F>
void dispatch_slot_dtype(const char* op, DType dtype, F&& f) {
  if (dtype == DType::f32) return f.template operator()<float>();
  if (dtype == DType::bf16) return f.template operator()<__nv_bfloat16>();
  FATHOM_FAIL(op, ": CUDA depth buffers are F32 or BF16, got ", dtype_name(dtype));
}

}  // namespace

void write_depth_slot(Tensor& buffer, int64_t slot, const Tensor& x) {
  const int64_t rows = x.dim(0) * x.dim(1), width = x.dim(2) * x.dim(3), S = buffer.dim(2);
  if (rows * width == 0) return;
  char* dst = static_cast<char*>(buffer.raw()) + size_t(slot * width) * dtype_size(buffer.dtype());
  dispatch_slot_dtype("write_depth_slot", x.dtype(), [&]<typename From>() {
    dispatch_slot_dtype("write_depth_slot", buffer.dtype(), [&]<typename To>() {
      copy_rows<From, To>(x.raw(), width, dst, S * width, rows, width, stream_for(buffer.device()));
    });
  });
}

void zero_depth_slots(Tensor& buffer, int64_t begin, int64_t end) {
  const int64_t rows = buffer.dim(0) * buffer.dim(1),
                slot_bytes = buffer.dim(3) * buffer.dim(4) * int64_t(dtype_size(buffer.dtype()));
  if (rows * (end - begin) * slot_bytes == 0) return;
  CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(buffer.raw()) + begin * slot_bytes,
                               size_t(buffer.dim(2) * slot_bytes), 0, size_t((end - begin) * slot_bytes), size_t(rows),
                               stream_for(buffer.device())));
}

Tensor read_depth_slot(const Tensor& buffer, int64_t slot, DType dtype) {
  const int64_t S = buffer.dim(2);
  Tensor x = Tensor::empty({buffer.dim(0), buffer.dim(1), buffer.dim(3), buffer.dim(4)}, dtype, buffer.device());
  const int64_t rows = x.dim(0) * x.dim(1), width = x.dim(2) * x.dim(3);
  if (rows * width == 0) return x;
  const char* src = static_cast<const char*>(buffer.raw()) + size_t(slot * width) * dtype_size(buffer.dtype());
  dispatch_slot_dtype("read_depth_slot", buffer.dtype(), [&]<typename From>() {
    dispatch_slot_dtype("read_depth_slot", dtype, [&]<typename To>() {
      copy_rows<From, To>(src, S * width, x.raw(), width, rows, width, stream_for(buffer.device()));
    });
  });
  return x;
}

}  // namespace fathom::cuda
