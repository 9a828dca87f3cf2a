// Resolves `train.device` (auto | cpu | cuda), the CPU thread count and the compute precision, and
// says how much memory a device has left.
#pragma once
#include <cstddef>
#include <string>

#include "core/device.h"

namespace fathom {

// auto picks CUDA when the backend is built and a GPU is present; cuda without one is an error.
// `setting` names where the request came from (train.device, --device) in the errors.
Device resolve_device(const std::string& requested, const std::string& setting = "train.device");
// threads = 0 uses every core, else 1..kMaxThreads. Applies to OpenMP kernels and Eigen GEMMs.
int configure_threads(int64_t threads, const std::string& setting = "train.threads");
// train.precision on `device`: true for bf16 or fp8 on a GPU (mixed precision: the arena's bf16 compute
// copy, bf16 activations). The CPU always computes in fp32, whatever the recipe says.
bool uses_mixed_precision(const std::string& precision, Device device);
// train.precision fp8: the blocks' linears run as FP8 GEMMs (layers/linear.h use_fp8_linears); on the
// CPU as the FP8 emulation.
bool uses_fp8_linears(const std::string& precision);
// Bytes of memory `device` can still give: MemAvailable of /proc/meminfo for the CPU (free pages and
// reclaimable cache), the driver's free count for a GPU.
size_t available_memory(Device device);
// Waits for the device's queued work (timing); nothing on the CPU.
void synchronize(Device device);

}  // namespace fathom
