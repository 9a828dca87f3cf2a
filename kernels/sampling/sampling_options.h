// How the next token is chosen from a row of logits: greedy (temperature 0), or a draw from
// softmax(logits / temperature) restricted to the top_k most likely tokens and to the smallest set
// whose probability reaches top_p (nucleus). Draws come from Philox counters (seed, draw index), so a
// seed reproduces a generation whatever the batch or device.
#pragma once
#include <cstdint>

namespace fathom {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax, lowest index on ties)
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // in (0, 1]
  uint64_t seed = 0;

  // Throws fathom::Error naming the option: temperature >= 0 and finite, top_k >= 0, top_p in (0, 1].
  void validate() const;
};

}  // namespace fathom
