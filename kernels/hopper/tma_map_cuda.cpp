#include "kernels/hopper/tma_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace fathom::cuda::flash {

namespace {

// The driver's encoder, reached through the runtime (fathom links no driver library).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    FATHOM_CHECK(err == cudaSuccess && found == cudaDriverEntryPointSuccess && fn != nullptr,
                 "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a driver for CUDA 12 or later): ",
                 cudaGetErrorString(err));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

CUtensorMap head_rows_map(const void* base, int64_t B, int64_t T, int64_t H, int64_t d, int rows) {
  FATHOM_CHECK(d % 8 == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0,
               "TMA tensor map: rows must be whole 16-byte chunks and 16-byte aligned (d = ", d, ")");
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(H), cuuint64_t(T), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(d * 2), cuuint64_t(H * d * 2), cuuint64_t(T * H * d * 2)};
  const cuuint32_t box[4] = {64, 1, cuuint32_t(rows), 1};
  const cuuint32_t steps[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult r =
      tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box,
                           steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FATHOM_CHECK(r == CUDA_SUCCESS, "TMA tensor map over [", B, ", ", T, ", ", H, ", ", d, "] with ", rows,
               "-row boxes: cuTensorMapEncodeTiled failed with error ", int(r));
  return map;
}

}  // namespace fathom::cuda::flash
