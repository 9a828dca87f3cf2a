#include "core/allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace fathom {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device) override {
    // 64-byte alignment suits AVX-512 loads and cache lines.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    FATHOM_CHECK(p != nullptr, "out of host memory: could not allocate ", bytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t, Device) override { std::free(ptr); }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    FATHOM_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "the CPU allocator cannot copy to or from ",
                 dst_device.is_cpu() ? src_device.str() : dst_device.str());
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* ptr, size_t bytes, Device) override {
    if (bytes) std::memset(ptr, 0, bytes);
  }
};

CpuAllocator cpu_allocator;
Allocator* cuda_allocator = nullptr;

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator;
  FATHOM_CHECK(cuda_allocator != nullptr, "a tensor on ", device.str(),
               " was requested, but this build of fathom has no usable CUDA backend "
               "(built without CUDA, or no GPU present); use train.device: cpu");
  return *cuda_allocator;
}

void register_cuda_allocator(Allocator* allocator) { cuda_allocator = allocator; }
bool cuda_backend_available() { return cuda_allocator != nullptr; }

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = allocator_for(device).allocate(bytes, device);
}

Storage::~Storage() { allocator_for(device_).deallocate(data_, bytes_, device_); }

}  // namespace fathom
