#include "data/windows.h"

#include <limits>

#include "core/error.h"

namespace fathom {

uint64_t count_windows(const TokenSource& source, int64_t seq_len, const char* who) {
  FATHOM_CHECK(seq_len >= 1, who, ": sequence length must be at least 1, got ", seq_len);
  FATHOM_CHECK(uint64_t(source.vocab_size()) - 1 <= uint64_t(std::numeric_limits<int32_t>::max()), who, ": vocab size ",
               source.vocab_size(), " does not fit int32 token ids");
  const uint64_t tokens = source.size();
  const uint64_t window = uint64_t(seq_len) + 1;
  FATHOM_CHECK(tokens >= window, who, ": ", source.describe(), " has ", tokens,
               " tokens, too few for one sample of sequence length T = ", seq_len, " (needs T + 1 = ", window,
               " tokens)");
  return (tokens - 1) / uint64_t(seq_len);
}

TokenBatch gather_windows(const TokenSource& source, std::span<const uint64_t> windows, int64_t seq_len) {
  const int64_t rows = int64_t(windows.size());
  TokenBatch batch{Tensor::empty({rows, seq_len}, DType::i32), Tensor::empty({rows, seq_len}, DType::i32)};
  int32_t* inputs = batch.inputs.data<int32_t>();
  int32_t* targets = batch.targets.data<int32_t>();
  std::vector<uint32_t> window(size_t(seq_len) + 1);
  for (int64_t r = 0; r < rows; ++r) {
    source.read(windows[size_t(r)] * uint64_t(seq_len), window);
    for (int64_t t = 0; t < seq_len; ++t) {
      inputs[r * seq_len + t] = int32_t(window[size_t(t)]);
      targets[r * seq_len + t] = int32_t(window[size_t(t) + 1]);
    }
  }
  return batch;
}

}  // namespace fathom
