#include "train/generate/sampler.h"

#include "core/error.h"
#include "kernels/sampling/sampling.h"

namespace fathom {

uint64_t draw_index(int64_t step, int64_t sample) {
  FATHOM_CHECK(step >= 0 && step < (int64_t(1) << 32) && sample >= 0 && sample < (int64_t(1) << 32), "sampling: step ",
               step, " and sample ", sample, " must each be in [0, 2^32)");
  return (uint64_t(sample) << 32) | uint64_t(step);
}

int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, uint64_t draw) {
  FATHOM_CHECK(!logits.empty(), "sample_token: no logits");
  return cpu::sample_row(logits, options, draw);
}

}  // namespace fathom
