// The device side of l2_prefetch.h: a grid's CTAs ask L2 for a plan's ranges between them.
#pragma once
#include "kernels/runtime/dependent_launch.cuh"
#include "kernels/runtime/l2_prefetch.h"

namespace fathom::cuda {

constexpr uint64_t kL2PrefetchPiece = 16 * 1024;

// This CTA's part of `plan` (CTA `cta` of `ctas`), where the asking kernel reads `reads` bytes of its own: each
// range's fraction (room - reads) / total, cut into pieces of kL2PrefetchPiece bytes, piece j asked for by lane
// j % 32 of the first warp of CTA j / 32 % ctas. Returns at once: L2 fetches them meanwhile.
__device__ __forceinline__ void prefetch_part(const L2Prefetch& plan, uint64_t reads, unsigned cta, unsigned ctas) {
  if (threadIdx.x >= 32 || plan.count == 0 || reads >= plan.room) return;
  const double kept = plan.room - reads >= plan.total ? 1.0 : double(plan.room - reads) / double(plan.total);
  const uint64_t first = (uint64_t(cta) * 32 + threadIdx.x) * kL2PrefetchPiece,
                 stride = uint64_t(ctas) * 32 * kL2PrefetchPiece;
  for (int r = 0; r < plan.count; ++r) {
    const uint64_t bytes = uint64_t(double(plan.bytes[r]) * kept) / 16 * 16;
    for (uint64_t at = first; at < bytes; at += stride)
      prefetch_to_l2(static_cast<const char*>(plan.data[r]) + at,
                     unsigned(bytes - at < kL2PrefetchPiece ? bytes - at : kL2PrefetchPiece));
  }
}

}  // namespace fathom::cuda
