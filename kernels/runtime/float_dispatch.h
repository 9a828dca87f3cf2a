// Host-side dtype dispatch for the CUDA kernels: runs f.template operator()<T>() with T the device
// element type of a floating tensor the kernels support: F32, or BF16 for mixed precision (f32
// arithmetic inside). Two types only, to keep the number of kernel instantiations small.
#pragma once
#include <cuda_bf16.h>

#include "core/dtype.h"
#include "core/error.h"

namespace fathom::cuda {

template <typename F>
void dispatch_device_float(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::bf16:
      return f.template operator()<__nv_bfloat16>();
    default:
      FATHOM_FAIL(op, ": the CUDA kernel takes F32 or BF16 tensors, got ", dtype_name(dtype));
  }
}

}  // namespace fathom::cuda
