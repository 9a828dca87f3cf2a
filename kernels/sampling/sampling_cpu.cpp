// The CPU reference: candidates sorted by descending logit (ties by index), the top-k cut, the nucleus
// cut, then an inverse-CDF walk down the kept tokens with Philox's uniform, in double precision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/philox.h"
#include "kernels/argmax/argmax.h"
#include "kernels/sampling/sampling.h"

namespace fathom::cpu {

namespace {

// The draw's uniform in (0, 1], shared with the CUDA kernel.
double uniform(const SamplingOptions& options, uint64_t draw_index) {
  return double(philox::to_unit(philox::draw(options.seed, draw_index, 0).v[0]));
}

}  // namespace

int64_t sample_row(std::span<const float> logits, const SamplingOptions& options, uint64_t draw_index) {
  if (options.temperature == 0) return argmax_row(logits);
  // NaN counts as -inf: never chosen.
  std::vector<float> v(logits.begin(), logits.end());
  for (float& x : v)
    if (x != x) x = -std::numeric_limits<float>::infinity();
  const float top = *std::max_element(v.begin(), v.end());
  if (!std::isfinite(top)) return argmax_row(logits);  // no distribution to draw from
  const auto weight = [&](size_t i) { return std::exp((double(v[i]) - top) / options.temperature); };
  const size_t keep = options.top_k > 0 ? std::min(size_t(options.top_k), v.size()) : v.size();
  if (keep == v.size() && options.top_p == 1.0) {
    // Every token is a candidate: index order does as well as sorted order, with no sort.
    std::vector<double> p(v.size());
    double total = 0;
    for (size_t i = 0; i < p.size(); ++i) total += p[i] = weight(i);
    const double u = uniform(options, draw_index) * total;
    double acc = 0;
    for (size_t i = 0; i < p.size(); ++i)
      if (u <= (acc += p[i])) return int64_t(i);
    return int64_t(p.size() - 1);
  }
  // Candidates by descending logit, ties by index, so the order is total.
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int64_t a, int64_t b) {
    return v[size_t(a)] > v[size_t(b)] || (v[size_t(a)] == v[size_t(b)] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + ptrdiff_t(keep), order.end(), before);
  order.resize(keep);
  std::vector<double> p(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) total += p[i] = weight(size_t(order[i]));
  // Nucleus: the shortest prefix whose mass reaches top_p.
  size_t n = 0;
  double mass = 0;
  while (n < p.size() && (n == 0 || mass < options.top_p * total)) mass += p[n++];
  const double u = uniform(options, draw_index) * mass;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += p[i];
    if (u <= acc) return order[i];
  }
  return order[n - 1];
}

Tensor sample_rows(const Tensor& logits, const SamplingOptions& options, const Tensor& draw_indices) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const std::vector<float> values = logits.to(DType::f32).to_vector<float>();
  const std::vector<int64_t> draws = draw_indices.to_vector<int64_t>();
  std::vector<int32_t> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    out[size_t(r)] = int32_t(sample_row(std::span<const float>(values.data() + r * vocab, size_t(vocab)), options,
                                        uint64_t(draws[size_t(r)])));
  return Tensor::from_vector(out, {rows});
}

}  // namespace fathom::cpu
