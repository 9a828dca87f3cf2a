// Backend start-up, streams and the device error record.
#include "kernels/runtime/runtime.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"
#include "kernels/runtime/caching_allocator.h"
#include "kernels/runtime/tensor_ops.h"

namespace fathom::cuda {

namespace {

// Created once by init() and kept for the life of the process: CUDA objects must not be destroyed by
// static destructors, which run after the driver may have shut down.
struct Runtime {
  int devices = 0;
  std::vector<cudaStream_t> default_streams;
  std::vector<cudaDeviceProp> properties;
  std::vector<int*> grid_counters;  // kGridCounters zeroed ints per device
  CachingAllocator* allocator = nullptr;
  DeviceErrorRecord* error_record = nullptr;  // host-mapped; host and device pointers are equal (UVA)
};
Runtime* runtime = nullptr;

Runtime& rt() {
  FATHOM_CHECK(runtime != nullptr, "the CUDA backend is not started: call fathom::cuda::init() first");
  return *runtime;
}

void check_device_index(int device) {
  FATHOM_CHECK(device >= 0 && device < rt().devices, "no CUDA device cuda:", device, " (", rt().devices, " present)");
}

// Per thread and device: the stream made current by a StreamGuard, or null for the default stream.
thread_local std::vector<cudaStream_t> current_streams;
thread_local int current_device = -1;

Runtime* start() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // no driver, or no device: the CPU backend serves
    return nullptr;
  }
  auto* r = new Runtime;
  r->devices = count;
  r->properties.resize(size_t(count));
  for (int d = 0; d < count; ++d) {
    CUDA_CHECK(cudaSetDevice(d));
    CUDA_CHECK(cudaGetDeviceProperties(&r->properties[size_t(d)], d));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    r->default_streams.push_back(s);
    void* counters = nullptr;
    CUDA_CHECK(cudaMalloc(&counters, kGridCounters * sizeof(int)));
    CUDA_CHECK(cudaMemset(counters, 0, kGridCounters * sizeof(int)));
    CUDA_CHECK(cudaDeviceSynchronize());  // zero before any kernel of the non-blocking streams reads them
    r->grid_counters.push_back(static_cast<int*>(counters));
  }
  CUDA_CHECK(cudaSetDevice(0));
  void* record = nullptr;
  CUDA_CHECK(cudaHostAlloc(&record, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(record, 0, sizeof(DeviceErrorRecord));
  void* device_record = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&device_record, record, 0));
  FATHOM_CHECK(device_record == record, "CUDA backend: unified addressing is required");
  r->error_record = static_cast<DeviceErrorRecord*>(record);
  r->allocator = new CachingAllocator(count);
  return r;
}

}  // namespace

bool init() {
  static std::once_flag once;
  std::call_once(once, [] {
    runtime = start();
    if (runtime) register_cuda_backend(CudaBackend{runtime->allocator, &cast, &fill});
  });
  return runtime != nullptr;
}

int device_count() { return init() ? runtime->devices : 0; }

std::string device_name(int device) {
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

DeviceMemory device_memory(int device) {
  check_device_index(device);
  int previous = 0;
  CUDA_CHECK(cudaGetDevice(&previous));
  CUDA_CHECK(cudaSetDevice(device));
  DeviceMemory memory;
  CUDA_CHECK(cudaMemGetInfo(&memory.free, &memory.total));
  CUDA_CHECK(cudaSetDevice(previous));
  return memory;
}

const cudaDeviceProp& device_properties(int device) {
  check_device_index(device);
  return rt().properties[size_t(device)];
}

int* grid_counters(int device) {
  check_device_index(device);
  return rt().grid_counters[size_t(device)];
}

StreamHandle current_stream(int device) {
  check_device_index(device);
  if (size_t(device) < current_streams.size() && current_streams[size_t(device)] != nullptr)
    return current_streams[size_t(device)];
  return rt().default_streams[size_t(device)];
}

cudaStream_t stream_for(Device device) {
  FATHOM_CHECK(device.is_cuda(), "stream_for: ", device.str(), " is not a CUDA device");
  cudaStream_t s = current_stream(device.index);
  if (current_device != device.index) {
    CUDA_CHECK(cudaSetDevice(device.index));
    current_device = device.index;
  }
  return s;
}

void synchronize(int device) {
  check_device_index(device);
  int previous = 0;
  CUDA_CHECK(cudaGetDevice(&previous));
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaSetDevice(previous));
  check_device_errors();
}

Stream Stream::create(int device) {
  check_device_index(device);
  int previous = 0;
  CUDA_CHECK(cudaGetDevice(&previous));
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_CHECK(cudaSetDevice(previous));
  return Stream(s, device);
}

Stream::Stream(Stream&& other) noexcept : handle_(other.handle_), device_(other.device_) { other.handle_ = nullptr; }

Stream& Stream::operator=(Stream&& other) noexcept {
  std::swap(handle_, other.handle_);
  std::swap(device_, other.device_);
  return *this;
}

Stream::~Stream() {
  // Wait for the stream's work first: the allocator may key cached blocks by this handle, and a later
  // stream given the same handle must not find blocks that unfinished work still uses.
  if (handle_) {
    cudaStreamSynchronize(handle_);
    cudaStreamDestroy(handle_);
  }
}

void Stream::synchronize() const {
  CUDA_CHECK(cudaStreamSynchronize(handle_));
  check_device_errors();
}

bool Stream::query() const {
  const cudaError_t status = cudaStreamQuery(handle_);
  if (status == cudaErrorNotReady) return false;
  CUDA_CHECK(status);
  return true;
}

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()) {
  previous_ = current_stream(device_);
  if (current_streams.size() < size_t(rt().devices)) current_streams.resize(size_t(rt().devices), nullptr);
  current_streams[size_t(device_)] = stream.handle();
}

StreamGuard::~StreamGuard() {
  current_streams[size_t(device_)] = previous_ == rt().default_streams[size_t(device_)] ? nullptr : previous_;
}

void stream_wait(StreamHandle waiter, StreamHandle producer, int device) {
  check_device_index(device);
  if (waiter == producer) return;
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(e, producer));
  CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
  CUDA_CHECK(cudaEventDestroy(e));  // released once the wait has been satisfied
}

void record_stream(const Tensor& t, StreamHandle stream) {
  FATHOM_CHECK(t.defined() && t.device().is_cuda(), "record_stream: needs a CUDA tensor, got ", describe(t));
  rt().allocator->record_stream(t.raw(), stream);
}

void empty_cache(int device) { rt().allocator->empty_cache(device); }

CachingAllocator& caching_allocator() { return *rt().allocator; }

DeviceErrorRecord* device_error_record() { return rt().error_record; }

void check_device_errors() {
  if (runtime == nullptr) return;
  volatile DeviceErrorRecord* r = runtime->error_record;
  const int code = r->code;
  if (code == kNoDeviceError) return;
  const long long value = r->value, index = r->index, bound = r->bound;
  r->code = kNoDeviceError;
  switch (code) {
    case kEmbeddingIdOutOfRange:
      FATHOM_FAIL("embedding: token id ", value, " at position ", index, " is outside the vocabulary [0, ", bound,
                  ") (found by a GPU kernel; reported at the next synchronisation)");
    case kCrossEntropyTargetOutOfRange:
      FATHOM_FAIL("cross_entropy: target ", value, " at row ", index, " is outside [0, ", bound,
                  ") and is not ignore_index (found by a GPU kernel)");
    case kRopeNegativePosition:
      FATHOM_FAIL("rope: position ", value, " at index ", index,
                  " is negative (found by a GPU kernel; reported at the next synchronisation)");
    case kRouteIndexOutOfRange:
      FATHOM_FAIL("MoD routing: index ", value, " at place ", index, " of idx is outside the sequence [0, ", bound,
                  ") (found by a GPU kernel; reported at the next synchronisation)");
    default:
      FATHOM_FAIL("a GPU kernel reported an unknown error code ", code);
  }
}

bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("FATHOM_CUDA_SYNC");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

namespace detail {

void fail_cuda(cudaError_t error, const char* expr, const char* file, int line) {
  ::fathom::detail::fail(
      file, line,
      ::fathom::detail::concat("CUDA error ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ") from ", expr,
                               "; to find the kernel that faulted, rerun with FATHOM_CUDA_SYNC=1"));
}

void fail_cublas(cublasStatus_t status, const char* expr, const char* file, int line) {
  ::fathom::detail::fail(file, line,
                         ::fathom::detail::concat("cuBLAS error ", cublasGetStatusName(status), " (",
                                                  cublasGetStatusString(status), ") from ", expr));
}

void check_launch(const char* file, int line) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess) fail_cuda(launch, "a kernel launch", file, line);
  if (sync_after_launch()) {
    const cudaError_t run = cudaDeviceSynchronize();
    if (run != cudaSuccess) fail_cuda(run, "a kernel (FATHOM_CUDA_SYNC=1)", file, line);
    check_device_errors();
  }
}

}  // namespace detail

}  // namespace fathom::cuda
