// Allocators per device kind. The CPU one is built in; the CUDA backend registers its caching
// allocator through core/backend.h, so core/ never depends on CUDA headers.
#pragma once
#include <cstddef>
#include <memory>

#include "core/device.h"

namespace fathom {

// Bytes held by live tensors on one device (current and its high-water mark), bytes a caching
// allocator keeps for reuse, and all it holds from the system or driver (live, cached and not yet
// reusable blocks) with that total's high-water mark: torch.cuda.max_memory_reserved's counterpart.
struct MemoryStats {
  size_t current = 0;
  size_t peak = 0;
  size_t cached = 0;
  size_t held = 0;
  size_t held_peak = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t bytes, Device device) = 0;
  // Copies between any two devices this allocator's backend can reach.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
  virtual void fill_zero(void* ptr, size_t bytes, Device device) = 0;
  virtual MemoryStats stats(Device device) = 0;
  virtual void reset_peak(Device device) = 0;
};

// The allocator for a device kind; throws a clear error when that backend is not available.
Allocator& allocator_for(Device device);

// While on, every host allocation arrives filled with 0xFF bytes (NaN in every float dtype, -1 in
// every integer one) instead of whatever the heap held, often zeros. Tests turn it on so that a
// read of memory nobody wrote shows up instead of passing as zero.
void set_poison_host_allocations(bool on);

// Owns one allocation on one device.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

}  // namespace fathom
