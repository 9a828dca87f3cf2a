// Choosing the next token from a row of logits on the host (kernels/sampling/sampling.h says how; its
// sample_rows does the same on the logits' device, for a whole batch). Draws come from Philox counters
// (seed, draw index), so a seed reproduces a generation. The draw index names the sequence and the step
// (draw_index below), never the batch row: a prompt's sampled continuation is the same decoded alone or
// in a batch with other prompts (train/generate/generator.h).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/sampling/sampling_options.h"

namespace fathom {

// The draw of sample `sample` of a prompt (0 .. --batch - 1) at decoding step `step` (0: the token after
// the prompt): sample * 2^32 + step. Sample 0, a prompt decoded once, draws `step`, as a batch of one
// always did. The device sampler is given the same numbers.
uint64_t draw_index(int64_t step, int64_t sample);

// The chosen token of one row; `draw` is its draw_index().
int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, uint64_t draw);

}  // namespace fathom
