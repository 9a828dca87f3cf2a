#include "core/backend.h"

#include <atomic>

#include "core/error.h"

namespace fathom {

namespace {
// Registered once and never freed, so readers need no lock: the pointer is published atomically.
std::atomic<const CudaBackend*> registered{nullptr};
}  // namespace

void register_cuda_backend(const CudaBackend& backend) {
  FATHOM_CHECK(backend.allocator && backend.cast && backend.fill, "register_cuda_backend: incomplete backend table");
  registered.store(new CudaBackend(backend), std::memory_order_release);
}

bool cuda_backend_available() { return registered.load(std::memory_order_acquire) != nullptr; }

const CudaBackend& cuda_backend() {
  const CudaBackend* b = registered.load(std::memory_order_acquire);
  FATHOM_CHECK(b != nullptr,
               "a CUDA tensor was requested, but this build of fathom has no usable CUDA backend "
               "(built without CUDA, no GPU present, or fathom::cuda::init() not called); use train.device: cpu");
  return *b;
}

}  // namespace fathom
