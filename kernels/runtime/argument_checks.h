// Argument checks shared by the CUDA launchers and their Tensor wrappers. Each error names the op and
// the argument, and is raised before anything is launched.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace fathom::cuda {

// True when every pointer (or tensor's data) is aligned to `bytes`: where a kernel's vector loads may take it.
inline bool aligned_to(size_t bytes, const void* p) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
inline bool aligned_to(size_t bytes, const Tensor& t) { return aligned_to(bytes, t.raw()); }
template <typename... P>
bool all_aligned(size_t bytes, const P*... ptrs) {
  return (aligned_to(bytes, ptrs) && ...);
}

// Kernels move bf16 tiles in 16-byte copies, so their pointers must be non-null and aligned.
inline void check_pointer(const char* op, const char* name, const void* p, size_t alignment) {
  FATHOM_CHECK(p != nullptr, op, ": ", name, " is null");
  FATHOM_CHECK(aligned_to(alignment, p), op, ": ", name, " must be ", alignment, "-byte aligned");
}

// A defined tensor of `dtype` on the CUDA `device` of the other inputs; `why` ends the dtype error
// with what the kernel computes in.
inline void check_device_tensor(const char* op, const char* name, const Tensor& t, DType dtype, Device device,
                                const char* why) {
  FATHOM_CHECK(t.defined(), op, ": ", name, " is undefined");
  FATHOM_CHECK(t.device().is_cuda() && t.device() == device, op, ": ", name, " ", describe(t), " must be on ",
               device.str(), " with the other inputs");
  FATHOM_CHECK(t.dtype() == dtype, op, ": ", name, " ", describe(t), " must be ", dtype_name(dtype), " (", why, ")");
}

}  // namespace fathom::cuda
