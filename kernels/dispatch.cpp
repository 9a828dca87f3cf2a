#include "kernels/dispatch.h"

namespace fathom {

Device common_device(const char* op, std::span<const Tensor* const> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) first = t;
    FATHOM_CHECK(t->device() == first->device(), op, ": tensors on different devices (", first->device().str(), " and ",
                 t->device().str(), ")");
  }
  return first ? first->device() : Device::cpu();
}

void no_cuda_kernel(const char* op) { FATHOM_FAIL(op, ": this build of fathom has no CUDA kernel for it"); }

}  // namespace fathom
