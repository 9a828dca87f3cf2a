// Choosing the next token from a row of logits on the host (kernels/sampling/sampling.h says how; its
// sample_rows does the same on the logits' device, for a whole batch).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/sampling/sampling_options.h"

namespace fathom {

// The chosen token of one row. draw_index numbers the draws of a generation (step * batch + row).
int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, uint64_t draw_index);

}  // namespace fathom
