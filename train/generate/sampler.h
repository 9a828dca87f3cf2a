// Choosing the next token from a row of logits: greedy (temperature 0), or sampling from
// softmax(logits / temperature) restricted to the top_k most likely tokens and to the smallest set
// whose probability reaches top_p (nucleus). Draws come from Philox counters (seed, draw index), so a
// seed reproduces a generation whatever the batch or device. The draw index names the sequence and the
// step (draw_index below), never the batch row: a prompt's sampled continuation is the same decoded
// alone or in a batch with other prompts (train/generate/generator.h).
#pragma once
#include <cstdint>
#include <span>

namespace fathom {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax, lowest index on ties)
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // in (0, 1]
  uint64_t seed = 0;

  // Throws fathom::Error naming the option: temperature >= 0 and finite, top_k >= 0, top_p in (0, 1].
  void validate() const;
};

// The draw of sample `sample` of a prompt (0 .. --batch - 1) at decoding step `step` (0: the token after
// the prompt): sample * 2^32 + step. Sample 0, a prompt decoded once, draws `step`, as a batch of one
// always did. A device sampler numbers its draws the same way.
uint64_t draw_index(int64_t step, int64_t sample);

// The chosen token of one row; `draw` is its draw_index().
int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, uint64_t draw);

}  // namespace fathom
