#include <cuda_runtime.h>

#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

bool supports_dependent_launch() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device_properties(device).major >= 9;
}

}  // namespace fathom::cuda
