// Shared by the data/ tests: random token streams (and, through test_support.h, scratch folders,
// byte edits and error checks).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "tests/support/test_support.h"

namespace fathom::testing {

// `count` ids uniform in [0, vocab_size).
inline std::vector<uint32_t> random_tokens(size_t count, uint32_t vocab_size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> id(0, vocab_size - 1);
  std::vector<uint32_t> tokens(count);
  for (uint32_t& t : tokens) t = id(rng);
  return tokens;
}

}  // namespace fathom::testing
