// Device side of the error record in runtime.h: the first kernel thread to find a bad argument
// claims the record, fills it, then publishes the code; later finds are dropped.
#pragma once
#include "kernels/runtime/runtime.h"

namespace fathom::cuda {

__device__ __forceinline__ void report_device_error(DeviceErrorRecord* record, int code, long long value,
                                                    long long index, long long bound) {
  if (atomicCAS(&record->code, kNoDeviceError, -1) != kNoDeviceError) return;
  record->value = value;
  record->index = index;
  record->bound = bound;
  __threadfence_system();
  atomicExch(&record->code, code);
}

}  // namespace fathom::cuda
