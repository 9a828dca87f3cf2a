#include "data/permutation.h"

#include <numeric>
#include <utility>

#include "core/philox.h"

namespace fathom {

namespace {
// Uniform integer in [0, bound) from the draw for (seed, epoch, step): key = seed, counter =
// (step, epoch). A 64-bit draw scaled by multiply-high; its bias is below bound / 2^64, far
// beneath anything measurable for sample counts a loader sees.
uint64_t uniform_below(uint64_t bound, uint64_t seed, uint64_t epoch, uint64_t step) {
  const philox::U32x4 r =
      philox::philox4x32(philox::U32x4{{uint32_t(step), uint32_t(step >> 32), uint32_t(epoch), uint32_t(epoch >> 32)}},
                         uint32_t(seed), uint32_t(seed >> 32));
  const uint64_t x = (uint64_t(r.v[1]) << 32) | r.v[0];
  return uint64_t((static_cast<unsigned __int128>(x) * bound) >> 64);
}
}  // namespace

std::vector<uint64_t> shuffled_indices(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t(0));
  // Fisher-Yates from the back: position i swaps with a uniform position in [0, i].
  for (uint64_t i = n; i > 1; --i) {
    const uint64_t j = uniform_below(i, seed, epoch, i - 1);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace fathom
