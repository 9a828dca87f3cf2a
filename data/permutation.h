// Seeded permutations for epoch shuffling. Fisher-Yates driven by Philox4x32-10 with integer-only
// arithmetic, so (n, seed, epoch) gives the same order on every platform, compiler and library
// (std::shuffle and the std distributions do not promise that).
#pragma once
#include <cstdint>
#include <vector>

namespace fathom {

// A permutation of 0..n-1; each (seed, epoch) pair gives an independent order.
std::vector<uint64_t> shuffled_indices(uint64_t n, uint64_t seed, uint64_t epoch);

}  // namespace fathom
