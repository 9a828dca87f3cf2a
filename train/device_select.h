// Resolves `train.device` (auto | cpu | cuda) and the CPU thread count.
#pragma once
#include <string>

#include "core/device.h"

namespace fathom {

// auto picks CUDA when the backend is built and a GPU is present; cuda without one is an error.
Device resolve_device(const std::string& requested);
// threads = 0 uses every core. Applies to OpenMP kernels and Eigen GEMMs.
int configure_threads(int64_t threads);

}  // namespace fathom
