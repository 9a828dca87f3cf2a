#include "train/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace fathom {

void SamplingOptions::validate() const {
  FATHOM_CHECK(std::isfinite(temperature) && temperature >= 0, "--temperature must be >= 0 (0 is greedy), got ",
               temperature);
  FATHOM_CHECK(top_k >= 0, "--top-k must be >= 0 (0 keeps every token), got ", top_k);
  FATHOM_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got ", top_p);
}

uint64_t draw_index(int64_t step, int64_t sample) {
  FATHOM_CHECK(step >= 0 && step < (int64_t(1) << 32) && sample >= 0 && sample < (int64_t(1) << 32), "sampling: step ",
               step, " and sample ", sample, " must each be in [0, 2^32)");
  return (uint64_t(sample) << 32) | uint64_t(step);
}

int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, uint64_t draw) {
  FATHOM_CHECK(!logits.empty(), "sample_token: no logits");
  if (options.temperature == 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  // Candidates by descending logit (ties by index, so the order is total); without a top-k or top-p
  // cut every token is a candidate and index order does as well, with no sort.
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t keep = options.top_k > 0 ? std::min(size_t(options.top_k), order.size()) : order.size();
  if (keep == order.size() && options.top_p == 1.0) {
    const double top = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double total = 0;
    for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp((logits[i] - top) / options.temperature);
    const double u = double(philox::to_unit(philox::draw(options.seed, draw, 0).v[0])) * total;
    double acc = 0;
    for (size_t i = 0; i < p.size(); ++i)
      if (u <= (acc += p[i])) return int64_t(i);
    return int64_t(p.size() - 1);
  }
  auto before = [&](int64_t a, int64_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + ptrdiff_t(keep), order.end(), before);
  order.resize(keep);
  const double top = logits[size_t(order.front())];
  std::vector<double> p(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i)
    total += p[i] = std::exp((logits[size_t(order[i])] - top) / options.temperature);
  // Nucleus: the shortest prefix whose mass reaches top_p.
  size_t n = 0;
  double mass = 0;
  while (n < p.size() && (n == 0 || mass < options.top_p * total)) mass += p[n++];
  const double u = double(philox::to_unit(philox::draw(options.seed, draw, 0).v[0])) * mass;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += p[i];
    if (u <= acc) return order[i];
  }
  return order[n - 1];
}

}  // namespace fathom
