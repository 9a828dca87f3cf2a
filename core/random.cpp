#include "core/random.h"

#include "core/philox.h"

namespace fathom {

namespace {
// Writes f(counter) into every element of a host float tensor, in f32 or f64. Each element depends
// only on its counter, so the threads split the range freely and the values do not depend on the
// thread count (a 1B model's 1.5e9 draws take a minute on one thread).
constexpr int64_t kMinParallelDraws = int64_t(1) << 16;
template <typename F>
void fill_with(Tensor& t, Generator& gen, F f) {
  FATHOM_CHECK(t.is_cpu(), "random fills run on the host; copy the result to ", t.device().str());
  const int64_t n = t.numel();
  if (t.dtype() == DType::f32) {
    float* p = t.data<float>();
#pragma omp parallel for schedule(static) if (n >= kMinParallelDraws)
    for (int64_t i = 0; i < n; ++i) p[i] = float(f(gen.offset + uint64_t(i)));
  } else if (t.dtype() == DType::f64) {
    double* p = t.data<double>();
#pragma omp parallel for schedule(static) if (n >= kMinParallelDraws)
    for (int64_t i = 0; i < n; ++i) p[i] = f(gen.offset + uint64_t(i));
  } else {
    FATHOM_FAIL("random fill needs an F32 or F64 tensor, got ", describe(t));
  }
  gen.offset += uint64_t(n);
}
}  // namespace

void fill_uniform(Tensor& t, Generator& gen, double low, double high) {
  fill_with(t, gen, [&](uint64_t i) {
    return low + (high - low) * double(philox::to_unit(philox::draw(gen.seed, i, 0).v[0]));
  });
}

void fill_normal(Tensor& t, Generator& gen, double mean, double std) {
  fill_with(t, gen, [&](uint64_t i) { return mean + std * double(philox::normal(gen.seed, i)); });
}

void fill_truncated_normal(Tensor& t, Generator& gen, double std, double cutoff) {
  fill_with(t, gen, [&](uint64_t i) { return std * double(philox::truncated_normal(gen.seed, i, float(cutoff))); });
}

}  // namespace fathom
