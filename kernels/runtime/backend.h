// The CUDA backend's public face for code built without CUDA headers (trainer, tests, benchmarks):
// start-up, streams and the caching allocator's controls. Kernels use kernels/runtime/runtime.h.
//
// Stream model: every device op runs on the calling thread's current stream of its device. By default
// that is the backend's own non-blocking stream for the device (created by init(); never the legacy
// default stream, which would serialise with everything). StreamGuard makes another stream current
// for a scope. Host-visible results (copies to the host, reductions returned as numbers) synchronise
// the current stream only.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace fathom::cuda {

using StreamHandle = CUstream_st*;

// Starts the backend once (later calls return the first answer): counts the devices, creates each
// one's default stream and registers the caching allocator and the cast/fill kernels with core
// (core/backend.h). Returns false, without throwing, when the CUDA runtime finds no usable device.
bool init();
int device_count();
// The device's marketing name as the driver reports it ("NVIDIA H200").
std::string device_name(int device = 0);

// The device's free and total memory as the driver reports them (free excludes this process's cache).
struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};
DeviceMemory device_memory(int device = 0);

// Waits for every stream of `device`, then reports any error a kernel recorded (see runtime.h).
void synchronize(int device = 0);

// A stream of one device, owned (destroyed with the object).
class Stream {
 public:
  static Stream create(int device = 0);
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  StreamHandle handle() const { return handle_; }
  int device() const { return device_; }
  void synchronize() const;
  // True when all work issued to the stream so far has finished.
  bool query() const;

 private:
  Stream(StreamHandle handle, int device) : handle_(handle), device_(device) {}
  StreamHandle handle_ = nullptr;
  int device_ = 0;
};

// The stream device work on `device` goes to from this thread.
StreamHandle current_stream(int device = 0);

// Makes a stream current on this thread for its scope (nests; restores the previous one).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  StreamHandle previous_;
};

// Makes `waiter` wait, on the device and without blocking the host, for all work issued to
// `producer` so far (both streams of one device).
void stream_wait(StreamHandle waiter, StreamHandle producer, int device = 0);

// Declares that t's memory is used by work on `stream` as well as on the stream it was allocated on.
// When t's storage is freed, its block becomes reusable only after the work issued to `stream` up to
// that moment has finished (an event is recorded then), so a tensor handed to another stream is never
// overwritten while that stream still reads it.
void record_stream(const Tensor& t, StreamHandle stream);

// Returns every cached (free) block of `device` to the driver.
void empty_cache(int device = 0);

// A device tensor's copy to the host that blocks only when asked for: start() issues the copy, into
// page-locked memory, behind the work already issued to the current stream of the tensor's device;
// wait() blocks until it is done and returns it as a CPU tensor. A decoding loop reads one step's ids
// this way while the device runs the next step.
class HostCopy {
 public:
  HostCopy();
  ~HostCopy();
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
  void start(const Tensor& from);
  Tensor wait();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A CUDA graph: the device work that one run of `body` issues to this thread's current stream of
// `device`, captured (not run) and then replayed on that stream as one launch. A replay redoes exactly
// the captured launches with the captured arguments and addresses, so `body` must read whatever
// changes between replays from device memory. Memory `body` frees while capturing stays the graph's
// until the graph is destroyed (the caching allocator sets it aside), so the addresses it captured
// stay valid; tensors `body` reads or writes that outlive it must be kept alive by the caller.
class Graph {
 public:
  // Captures `body`. When the capture fails (body throws, or issues work a graph cannot hold, such as
  // a copy to the host or a synchronisation), the work is discarded, the stream leaves capture mode,
  // and the result is an empty Graph with the reason in *reason.
  static Graph capture(int device, const std::function<void()>& body, std::string* reason);
  Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  ~Graph();
  bool captured() const { return state_ != nullptr; }
  // Launches the graph on the stream it was captured on (it must be captured).
  void replay() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fathom::cuda
