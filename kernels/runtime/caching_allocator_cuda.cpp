#include "kernels/runtime/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string>

#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

namespace {

// Sizes at most 1/8 larger than asked: a multiple of a power of two 8 to 16 times below the size.
size_t rounded_size(size_t bytes) {
  constexpr size_t kMin = 512;
  if (bytes <= kMin) return kMin;
  const size_t unit = std::max(kMin, std::bit_floor(bytes) / 8);
  return (bytes + unit - 1) / unit * unit;
}

std::string human_bytes(size_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  if (bytes >= (size_t(1) << 30))
    out << double(bytes) / double(size_t(1) << 30) << " GiB";
  else if (bytes >= (size_t(1) << 20))
    out << double(bytes) / double(size_t(1) << 20) << " MiB";
  else
    out << bytes << " bytes";
  return out.str();
}

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// A graph replays a copy from the address it captured, long after this host buffer is gone, and a copy
// to the host waits for the stream: neither belongs in a capture (kernels/runtime/backend.h Graph).
void refuse_host_copy_in_capture(cudaStream_t stream, const char* what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  FATHOM_CHECK(status == cudaStreamCaptureStatusNone, what,
               " cannot be part of a CUDA graph capture (the graph would replay it from memory that is gone, "
               "or the host would wait for work not yet run)");
}

bool caching_enabled() {
  const char* v = std::getenv("FATHOM_CUDA_NO_CACHE");
  return !(v && std::strcmp(v, "1") == 0);
}

}  // namespace

CachingAllocator::CachingAllocator(int device_count) : caching_(caching_enabled()), devices_(size_t(device_count)) {}

void* CachingAllocator::take_cached(int device, DeviceState& state, cudaStream_t stream, size_t size) {
  auto it = state.free_blocks.lower_bound({stream, size});
  // Best fit among this stream's blocks, accepting at most 1/8 of extra size.
  if (it == state.free_blocks.end() || it->first.first != stream || it->first.second > size + size / 8) return nullptr;
  void* ptr = it->second;
  const size_t block_size = it->first.second;
  state.free_blocks.erase(it);
  state.stats.cached -= block_size;
  live_[ptr] = Block{ptr, block_size, device, stream, {}};
  return ptr;
}

void CachingAllocator::collect_pending(DeviceState& state, bool wait) {
  auto done = [&](PendingBlock& p) {
    for (cudaEvent_t e : p.events) {
      if (wait) {
        CUDA_CHECK(cudaEventSynchronize(e));
        continue;
      }
      const cudaError_t status = cudaEventQuery(e);
      if (status == cudaErrorNotReady) return false;
      CUDA_CHECK(status);
    }
    return true;
  };
  for (size_t i = 0; i < state.pending.size();) {
    PendingBlock& p = state.pending[i];
    if (!done(p)) {
      ++i;
      continue;
    }
    state.spare_events.insert(state.spare_events.end(), p.events.begin(), p.events.end());
    state.free_blocks.insert({{p.block.stream, p.block.size}, p.block.ptr});
    state.stats.cached += p.block.size;
    state.pending[i] = std::move(state.pending.back());
    state.pending.pop_back();
  }
}

void CachingAllocator::release_free_blocks(int device, DeviceState& state) {
  DeviceScope scope(device);
  for (auto& [key, ptr] : state.free_blocks) {
    CUDA_CHECK(cudaFree(ptr));
    state.stats.cached -= key.second;
    state.stats.held -= key.second;
  }
  state.free_blocks.clear();
}

void* CachingAllocator::allocate(size_t bytes, Device device) {
  if (bytes == 0) return nullptr;
  FATHOM_CHECK(device.is_cuda() && device.index >= 0 && device.index < int(devices_.size()),
               "CUDA allocator: no such device ", device.str(), " (", devices_.size(), " present)");
  const size_t size = caching_ ? rounded_size(bytes) : bytes;
  cudaStream_t stream = current_stream(device.index);
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& state = devices_[size_t(device.index)];
  void* ptr = nullptr;
  if (caching_) {
    collect_pending(state, false);
    ptr = take_cached(device.index, state, stream, size);
  }
  if (ptr == nullptr) {
    DeviceScope scope(device.index);
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it and retry with the cache returned to the driver
      collect_pending(state, true);
      release_free_blocks(device.index, state);
      status = cudaMalloc(&ptr, size);
      if (status == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        fail_out_of_memory(device.index, bytes);
      }
    }
    CUDA_CHECK(status);
    live_[ptr] = Block{ptr, size, device.index, stream, {}};
    state.stats.held += size;
    state.stats.held_peak = std::max(state.stats.held_peak, state.stats.held);
  }
  state.stats.current += live_[ptr].size;
  state.stats.peak = std::max(state.stats.peak, state.stats.current);
  return ptr;
}

void CachingAllocator::fail_out_of_memory(int device, size_t requested) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const MemoryStats& s = devices_[size_t(device)].stats;
  FATHOM_FAIL("CUDA out of memory on cuda:", device, ": could not allocate ", human_bytes(requested), " (", requested,
              " bytes requested); the device has ", human_bytes(free_bytes), " (", free_bytes, " bytes) free of ",
              human_bytes(total_bytes), ", and fathom's tensors hold ", human_bytes(s.current), " (peak ",
              human_bytes(s.peak),
              ") after its cache was returned. Use a smaller train.batch_size, "
              "or recompute activations in the backward pass (train.recompute: block)");
}

void CachingAllocator::deallocate(void* ptr, size_t, Device device) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  FATHOM_CHECK(it != live_.end(), "CUDA allocator: freeing a pointer it did not allocate on ", device.str());
  Block block = std::move(it->second);
  live_.erase(it);
  DeviceState& state = devices_[size_t(block.device)];
  state.stats.current -= block.size;
  if (state.retaining) {  // a capture is running: the block stays the graph's
    state.retained.push_back({ptr, block.size, block.stream});
    return;
  }
  if (!caching_) {
    DeviceScope scope(block.device);
    CUDA_CHECK(cudaFree(ptr));  // waits for the device, so no stream can still be using it
    state.stats.held -= block.size;
    return;
  }
  if (block.other_streams.empty()) {
    state.free_blocks.insert({{block.stream, block.size}, ptr});
    state.stats.cached += block.size;
    return;
  }
  DeviceScope scope(block.device);
  PendingBlock pending;
  for (cudaStream_t s : block.other_streams) {
    cudaEvent_t e;
    if (state.spare_events.empty()) {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = state.spare_events.back();
      state.spare_events.pop_back();
    }
    CUDA_CHECK(cudaEventRecord(e, s));
    pending.events.push_back(e);
  }
  block.other_streams.clear();
  pending.block = std::move(block);
  state.pending.push_back(std::move(pending));
}

void CachingAllocator::record_stream(const void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(const_cast<void*>(ptr));
  FATHOM_CHECK(it != live_.end(), "record_stream: the tensor's memory was not allocated by the CUDA allocator");
  Block& b = it->second;
  if (stream != b.stream && std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end())
    b.other_streams.push_back(stream);
}

void CachingAllocator::empty_cache(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  FATHOM_CHECK(device >= 0 && device < int(devices_.size()), "empty_cache: no device cuda:", device);
  DeviceState& state = devices_[size_t(device)];
  collect_pending(state, true);
  release_free_blocks(device, state);
}

void CachingAllocator::begin_retaining(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  FATHOM_CHECK(device >= 0 && device < int(devices_.size()), "begin_retaining: no device cuda:", device);
  DeviceState& state = devices_[size_t(device)];
  FATHOM_CHECK(!state.retaining, "begin_retaining: cuda:", device, " already retains freed blocks for a capture");
  state.retaining = true;
}

std::vector<CachingAllocator::Retained> CachingAllocator::end_retaining(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  FATHOM_CHECK(device >= 0 && device < int(devices_.size()), "end_retaining: no device cuda:", device);
  DeviceState& state = devices_[size_t(device)];
  state.retaining = false;
  return std::exchange(state.retained, {});
}

void CachingAllocator::release_retained(int device, const std::vector<Retained>& blocks) {
  if (blocks.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& state = devices_[size_t(device)];
  for (const Retained& b : blocks) {
    if (!caching_) {
      DeviceScope scope(device);
      CUDA_CHECK(cudaFree(b.ptr));  // waits for the device: no replay can still be writing it
      state.stats.held -= b.size;
      continue;
    }
    state.free_blocks.insert({{b.stream, b.size}, b.ptr});
    state.stats.cached += b.size;
  }
}

void CachingAllocator::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (src_device.is_cpu()) {  // pageable source: returns once the bytes are staged, so src may be freed
    cudaStream_t stream = stream_for(dst_device);
    refuse_host_copy_in_capture(stream, "a copy from the host");
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  cudaStream_t src_stream = stream_for(src_device);
  if (dst_device.is_cpu()) {
    refuse_host_copy_in_capture(src_stream, "a copy to the host");
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, src_stream));
    CUDA_CHECK(cudaStreamSynchronize(src_stream));
    check_device_errors();
    return;
  }
  if (dst_device != src_device) CUDA_CHECK(cudaStreamSynchronize(src_stream));  // the source is complete
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_for(dst_device)));
}

void CachingAllocator::fill_zero(void* ptr, size_t bytes, Device device) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_for(device)));
}

MemoryStats CachingAllocator::stats(Device device) {
  std::lock_guard<std::mutex> lock(mutex_);
  FATHOM_CHECK(device.index >= 0 && device.index < int(devices_.size()), "memory stats: no device ", device.str());
  return devices_[size_t(device.index)].stats;
}

void CachingAllocator::reset_peak(Device device) {
  std::lock_guard<std::mutex> lock(mutex_);
  FATHOM_CHECK(device.index >= 0 && device.index < int(devices_.size()), "memory stats: no device ", device.str());
  MemoryStats& s = devices_[size_t(device.index)].stats;
  s.peak = s.current;
  s.held_peak = s.held;
}

}  // namespace fathom::cuda
