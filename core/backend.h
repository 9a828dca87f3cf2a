// How core/ reaches the CUDA backend without including CUDA headers. kernels/runtime fills a CudaBackend
// table and registers it from fathom::cuda::init() (kernels/runtime/backend.h), which the trainer's
// device selection, the GPU tests and the benchmarks call. Nothing registers itself from a static
// initialiser: the linker may drop a static library's unreferenced objects, initialisers and all.
#pragma once

namespace fathom {

class Allocator;
class Tensor;

struct CudaBackend {
  Allocator* allocator = nullptr;  // caching device allocator (also copies host <-> device)
  // The two kernels Tensor itself needs on a device: dst = src converted elementwise (same shape
  // and device, any dtypes), and dst = value.
  void (*cast)(const Tensor& src, Tensor& dst) = nullptr;
  void (*fill)(Tensor& dst, double value) = nullptr;
};

// Called once by the backend when a device is usable; a second call replaces the table.
void register_cuda_backend(const CudaBackend& backend);
// True once a backend with a usable device has registered.
bool cuda_backend_available();
// The registered table; throws a clear error when there is none.
const CudaBackend& cuda_backend();

}  // namespace fathom
