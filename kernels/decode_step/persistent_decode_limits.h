// The shapes the persistent decoding kernel is built for (persistent_decode.h), shared by its host checks and
// the kernel, and the CUDA side's check of the device.
#pragma once
#include <cstdint>
#include <string>

#include "core/device.h"

namespace fathom::persistent_decode {

// A GEMM's input width K: a shared-memory stage (16 KiB) holds at least one row of K BF16 values and at most
// kMaxStageRows; every warp's slice of a row is a whole number of 16-byte vectors.
constexpr int64_t kStageBytes = 16384;
constexpr int64_t kMinWidth = 512;
constexpr int64_t kMaxWidth = kStageBytes / 2;
constexpr int64_t kWidthMultiple = 64;
constexpr int64_t kMaxStageRows = kStageBytes / (2 * kMinWidth);
// Query heads a KV head (a CTA attends for one KV head's group at a time).
constexpr int64_t kMaxGroup = 4;
// Gate rows a CTA holds for SwiGLU until their up rows arrive.
constexpr int64_t kMaxGateRows = 512;
// Layers (their weights' addresses are copied into shared memory).
constexpr int64_t kMaxLayers = 64;

}  // namespace fathom::persistent_decode

#ifdef FATHOM_WITH_CUDA
namespace fathom::cuda {
// "" when `device` can run the kernel for an FFN of width F (compute capability 9.0, one CTA per SM resident, F
// over the SMs within the gate rows a CTA holds), else why not.
std::string persistent_decode_device_unfit(Device device, int64_t F);
}  // namespace fathom::cuda
#endif
