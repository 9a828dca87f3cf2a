#include "train/cli/device_select.h"

#include <omp.h>

#include <fstream>
#include <limits>
#include <string>

#include "core/backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu_support/eigen_core.h"
#ifdef FATHOM_WITH_CUDA
#include "kernels/runtime/backend.h"
#endif

namespace fathom {

namespace {
// Starts the CUDA backend where it is built (registering it with core); false without a device.
bool cuda_usable() {
#ifdef FATHOM_WITH_CUDA
  return cuda::init();
#else
  return cuda_backend_available();
#endif
}
}  // namespace

Device resolve_device(const std::string& requested, const std::string& setting) {
  if (requested == "cpu") return Device::cpu();
  if (requested == "cuda") {
    FATHOM_CHECK(cuda_usable(), setting,
                 " asks for cuda, but no GPU is usable here (this build has no CUDA backend or no "
                 "device was found); use ",
                 setting, " cpu or auto");
    return Device::cuda(0);
  }
  FATHOM_CHECK(requested == "auto", setting, " must be auto, cpu or cuda; got '", requested, "'");
  return cuda_usable() ? Device::cuda(0) : Device::cpu();
}

int configure_threads(int64_t threads, const std::string& setting) {
  FATHOM_CHECK(threads >= 0 && threads <= kMaxThreads, setting, " must be between 0 (every core) and ", kMaxThreads,
               ", got ", threads);
  const int n = threads > 0 ? int(threads) : omp_get_num_procs();
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
  return n;
}

bool uses_mixed_precision(const std::string& precision, Device device) {
  return device.is_cuda() && (precision == "bf16" || precision == "fp8");
}

bool uses_fp8_linears(const std::string& precision) { return precision == "fp8"; }

size_t available_memory(Device device) {
#ifdef FATHOM_WITH_CUDA
  if (device.is_cuda()) return cuda::device_memory(device.index).free;
#endif
  FATHOM_CHECK(device.is_cpu(), "available_memory: no backend for ", device.str());
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib << 10;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return std::numeric_limits<size_t>::max();  // not Linux: no limit known
}

void synchronize(Device device) {
#ifdef FATHOM_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize(device.index);
#else
  (void)device;
#endif
}

}  // namespace fathom
