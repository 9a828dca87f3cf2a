// When the CPU kernels open an OpenMP parallel region. A region costs microseconds on idle cores but
// up to a scheduler time slice when other processes compete for them, so small work stays on one
// thread.
#pragma once
#include <cstdint>

namespace fathom::cpu {

// Compute-bound loops, counted in multiply-adds, exps or trig evaluations.
constexpr int64_t kMinParallelWork = int64_t(1) << 18;
// Memory-bound loops, counted in elements touched.
constexpr int64_t kMinParallelElements = int64_t(1) << 20;

}  // namespace fathom::cpu
