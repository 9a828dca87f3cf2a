// What every CUDA source of the backend shares: checked library calls, checked kernel launches, the
// stream a launch goes to, device properties, and the host-mapped record through which kernels report
// bad arguments they find in device data (token ids, targets, positions).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/device.h"
#include "core/error.h"
#include "kernels/runtime/backend.h"

namespace fathom::cuda {

namespace detail {
[[noreturn]] void fail_cuda(cudaError_t error, const char* expr, const char* file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t status, const char* expr, const char* file, int line);
void check_launch(const char* file, int line);
}  // namespace detail

// Makes `device` current on this thread and returns its current stream: the stream an op on
// tensors of that device launches to.
cudaStream_t stream_for(Device device);
const cudaDeviceProp& device_properties(int device);

// Counters for kernels whose last CTA to finish does a grid's final step (a "last block" reduction, one
// launch instead of two): kGridCounters ints per device, zeroed when the backend starts. A kernel counts
// its CTAs on a range of them and its last CTA sets that range back to zero, so they are zero between
// kernels and between a CUDA graph's replays with no memset. Such kernels must not run at once on two
// streams of a device (decoding runs them on one).
constexpr int64_t kGridCounters = int64_t(1) << 15;
int* grid_counters(int device);
class CachingAllocator;
CachingAllocator& caching_allocator();

// Errors kernels find in device-resident arguments. The first one is written to a host-mapped record
// (so no kernel ever reads out of bounds and nothing waits for the device); the host reads it after
// each synchronisation (copies to the host, synchronize(), reductions returning numbers) and throws
// a fathom::Error naming the op, the value, its position and the valid range.
enum DeviceErrorCode : int {
  kNoDeviceError = 0,
  kEmbeddingIdOutOfRange = 1,         // value = id, index = position in ids, bound = vocabulary size
  kCrossEntropyTargetOutOfRange = 2,  // value = target, index = row, bound = vocabulary size
  kRopeNegativePosition = 3,          // value = position, index = its index in positions
  kRouteIndexOutOfRange = 4,          // value = index, index = its place in idx, bound = sequence length
};
struct DeviceErrorRecord {
  int code;  // 0 none, -1 while being written, else a DeviceErrorCode
  int unused;
  long long value, index, bound;
};
// Device-visible pointer to the record (host-mapped memory).
DeviceErrorRecord* device_error_record();
// Throws (and clears the record) if a kernel reported an error; call only after a synchronisation.
void check_device_errors();

// Set FATHOM_CUDA_SYNC=1 to synchronise after every launch, so an asynchronous fault is reported
// at the kernel that caused it.
bool sync_after_launch();

}  // namespace fathom::cuda

#define CUDA_CHECK(expr)                                                                 \
  do {                                                                                   \
    const cudaError_t fathom_cuda_status_ = (expr);                                      \
    if (fathom_cuda_status_ != cudaSuccess)                                              \
      ::fathom::cuda::detail::fail_cuda(fathom_cuda_status_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                       \
    const cublasStatus_t fathom_cublas_status_ = (expr);                                     \
    if (fathom_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::fathom::cuda::detail::fail_cublas(fathom_cublas_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// Follows every kernel launch: reports launch errors (bad configuration, missing kernel image) at
// once, and with FATHOM_CUDA_SYNC=1 also faults during the kernel.
#define CUDA_CHECK_LAUNCH() ::fathom::cuda::detail::check_launch(__FILE__, __LINE__)
