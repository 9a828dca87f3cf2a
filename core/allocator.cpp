#include "core/allocator.h"
#include "core/host_memory_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/error.h"

namespace fathom {

namespace {

std::atomic<bool> poison_host_allocations{false};

// Host memory with a cache of freed blocks by size. A training step allocates the same activation
// sizes every time; without the cache, glibc serves large blocks by fresh mmaps whose page faults
// cost the first steps several times their steady speed.
class CpuAllocator final : public Allocator {
 public:
  ~CpuAllocator() override {
    for (auto& [size, blocks] : cache_)
      for (void* p : blocks) std::free(p);
  }
  void* allocate(size_t bytes, Device) override {
    void* p = take(bytes);
    if (poison_host_allocations.load(std::memory_order_relaxed)) std::memset(p, 0xFF, bytes);
    return p;
  }
  // A block of at least `bytes`: from the cache, else from the heap.
  void* take(size_t bytes) {
    const size_t size = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.current += size;
      stats_.peak = std::max(stats_.peak, stats_.current);
      auto it = cache_.find(size);
      if (it != cache_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached -= size;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, size);  // 64 bytes: AVX-512 loads and cache lines
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (p == nullptr) {
        stats_.current -= size;
      } else {
        stats_.held += size;
        stats_.held_peak = std::max(stats_.held_peak, stats_.held);
      }
    }
    FATHOM_CHECK(p != nullptr, "out of host memory: could not allocate ", bytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t bytes, Device) override {
    const size_t size = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.current -= size;
      if (size >= kCacheFrom && stats_.cached + size <= kCacheLimit) {
        cache_[size].push_back(ptr);
        stats_.cached += size;
        return;
      }
      stats_.held -= size;
    }
    std::free(ptr);
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    FATHOM_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "the CPU allocator cannot copy to or from ",
                 dst_device.is_cpu() ? src_device.str() : dst_device.str());
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* ptr, size_t bytes, Device) override {
    if (bytes) std::memset(ptr, 0, bytes);
  }
  MemoryStats stats(Device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak(Device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak = stats_.current;
    stats_.held_peak = stats_.held;
  }
  void release_cached() {
    std::map<size_t, std::vector<void*>> cached;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cached.swap(cache_);
      stats_.held -= stats_.cached;
      stats_.cached = 0;
    }
    for (auto& [size, blocks] : cached)
      for (void* p : blocks) std::free(p);
  }

 private:
  static constexpr size_t kCacheFrom = size_t(64) << 10;  // malloc serves small blocks well itself
  static constexpr size_t kCacheLimit = size_t(2) << 30;  // never hold more than 2 GiB idle
  // Rounds up to 64 bytes, and large blocks to 4 KiB pages so near sizes share a bucket.
  static size_t block_size(size_t bytes) {
    const size_t unit = 64;
    return std::max<size_t>((bytes + unit - 1) / unit * unit, 64);
  }
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> cache_;
  MemoryStats stats_;
};

CpuAllocator cpu_allocator;

}  // namespace

void release_cached_host_memory() { cpu_allocator.release_cached(); }

void set_poison_host_allocations(bool on) { poison_host_allocations.store(on, std::memory_order_relaxed); }

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator;
  return *cuda_backend().allocator;
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = allocator_for(device).allocate(bytes, device);
}

Storage::~Storage() { allocator_for(device_).deallocate(data_, bytes_, device_); }

}  // namespace fathom
