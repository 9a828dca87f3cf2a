#include <cuda_runtime.h>

#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

bool supports_sm90_launches(int device) {
#ifdef FATHOM_SM90_KERNELS
  return device_properties(device).major >= 9;
#else
  (void)device;
  return false;
#endif
}

bool current_device_supports_sm90_launches() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return supports_sm90_launches(device);
}

}  // namespace fathom::cuda
