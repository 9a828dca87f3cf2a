// Seeded tensor initialisation on top of Philox. A generator is (seed, offset): each fill consumes
// `numel` counters, so a saved generator state resumes the exact stream.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace fathom {

struct Generator {
  uint64_t seed = 0;
  uint64_t offset = 0;  // next unused counter
};

void fill_uniform(Tensor& t, Generator& gen, double low, double high);
void fill_normal(Tensor& t, Generator& gen, double mean, double std);
// Normal(0, std) truncated at +-cutoff standard deviations (OLMo2 init: std 0.02, cutoff 3).
void fill_truncated_normal(Tensor& t, Generator& gen, double std, double cutoff);

}  // namespace fathom
