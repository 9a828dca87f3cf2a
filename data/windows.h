// Training and evaluation samples: window k holds tokens [k*T, k*T + T + 1) of a source; its first
// T tokens are the inputs and its last T the targets (inputs shifted by one). Windows start at
// multiples of T, so consecutive windows share one boundary token and no input is repeated.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "data/token_source.h"

namespace fathom {

struct TokenBatch {
  Tensor inputs;   // i32 [B, T]
  Tensor targets;  // i32 [B, T]
};

// Number of full windows of length seq_len + 1; fewer than one is an error naming `who`, T and the
// token count. Also checks seq_len >= 1 and that the vocab fits int32 ids.
uint64_t count_windows(const TokenSource& source, int64_t seq_len, const char* who);

// Builds a batch with one row per window index.
TokenBatch gather_windows(const TokenSource& source, std::span<const uint64_t> windows, int64_t seq_len);

}  // namespace fathom
