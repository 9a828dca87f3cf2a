#include "train/device_select.h"

#include <omp.h>

#include <Eigen/Core>

#include "core/allocator.h"
#include "core/error.h"

namespace fathom {

Device resolve_device(const std::string& requested) {
  if (requested == "cpu") return Device::cpu();
  if (requested == "cuda") {
    FATHOM_CHECK(cuda_backend_available(),
                 "the recipe asks for train.device: cuda, but no GPU is usable here (this build has no CUDA "
                 "backend or no device was found); set train.device: cpu or auto");
    return Device::cuda(0);
  }
  FATHOM_CHECK(requested == "auto", "train.device must be auto, cpu or cuda; got '", requested, "'");
  return cuda_backend_available() ? Device::cuda(0) : Device::cpu();
}

int configure_threads(int64_t threads) {
  const int n = threads > 0 ? int(threads) : omp_get_num_procs();
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
  return n;
}

}  // namespace fathom
