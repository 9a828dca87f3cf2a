#include "train/generate/sampler.h"

#include "core/error.h"
#include "kernels/sampling/sampling.h"

namespace fathom {

int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, uint64_t draw_index) {
  FATHOM_CHECK(!logits.empty(), "sample_token: no logits");
  return cpu::sample_row(logits, options, draw_index);
}

}  // namespace fathom
