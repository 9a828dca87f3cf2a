// Stream-aware caching allocator for device memory. Freed blocks are kept for reuse by the stream they
// were allocated on, where stream order alone makes reuse safe; a block also used on other streams
// (record_stream) waits for events recorded on those streams at free time before it is reused.
// Sizes are rounded up (at most 1/8 of waste) so that a training step's repeated shapes reuse blocks.
// When cudaMalloc fails, the cache is returned to the driver and the allocation retried; a second
// failure is a fathom::Error with the requested and free bytes and what to change.
// FATHOM_CUDA_NO_CACHE=1 turns caching off (every free goes to cudaFree), so tools such as
// compute-sanitizer see exact allocation bounds.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"

namespace fathom::cuda {

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device_count);

  // On the current stream of `device`.
  void* allocate(size_t bytes, Device device) override;
  void deallocate(void* ptr, size_t bytes, Device device) override;
  // Host -> device copies are queued on the destination's current stream; device -> host copies
  // wait for the source's current stream (the host reads the bytes next).
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override;
  void fill_zero(void* ptr, size_t bytes, Device device) override;
  MemoryStats stats(Device device) override;
  void reset_peak(Device device) override;

  void record_stream(const void* ptr, cudaStream_t stream);
  void empty_cache(int device);

  // CUDA graph capture (kernels/runtime/graph_cuda.cpp): while `device` retains, a freed block is set aside
  // instead of cached, so no later allocation can take memory a captured graph still writes at each
  // replay. end_retaining() hands the blocks set aside to the graph; release_retained() caches them
  // again once the graph is gone (for the stream each was allocated on, whose order makes reuse safe).
  struct Retained {
    void* ptr;
    size_t size;
    cudaStream_t stream;
  };
  void begin_retaining(int device);
  std::vector<Retained> end_retaining(int device);
  void release_retained(int device, const std::vector<Retained>& blocks);

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    int device = 0;
    cudaStream_t stream = nullptr;            // allocated on (and cached for) this stream
    std::vector<cudaStream_t> other_streams;  // record_stream()
  };
  struct PendingBlock {
    Block block;
    std::vector<cudaEvent_t> events;  // recorded on other_streams when the block was freed
  };
  struct DeviceState {
    std::multimap<std::pair<cudaStream_t, size_t>, void*> free_blocks;  // by (stream, size)
    std::vector<PendingBlock> pending;
    std::vector<cudaEvent_t> spare_events;
    MemoryStats stats;
    bool retaining = false;
    std::vector<Retained> retained;
  };

  void* take_cached(int device, DeviceState& state, cudaStream_t stream, size_t size);
  void collect_pending(DeviceState& state, bool wait);
  void release_free_blocks(int device, DeviceState& state);
  [[noreturn]] void fail_out_of_memory(int device, size_t requested);

  const bool caching_;
  std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::vector<DeviceState> devices_;
};

}  // namespace fathom::cuda
