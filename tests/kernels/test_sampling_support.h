// Shared by the sampling tests: the exact probabilities a sampler must draw from, written from the
// definition with a full sort, awkward logit rows, and a chi-square check of drawn counts against them.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "core/philox.h"
#include "kernels/sampling/sampling_options.h"

namespace fathom::test {

// Each token's probability under `options`: softmax(logits / temperature) over the top_k largest
// logits (ties to the lower index), cut to the shortest prefix whose mass reaches top_p, renormalised.
// NaN counts as -inf; temperature 0, or a row with no finite maximum, puts all mass on the argmax.
inline std::vector<double> sampling_probabilities(std::span<const float> logits, const SamplingOptions& options) {
  const size_t n = logits.size();
  std::vector<double> v(n), p(n, 0.0);
  for (size_t i = 0; i < n; ++i) v[i] = std::isnan(logits[i]) ? -INFINITY : double(logits[i]);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
  const double top = v[order[0]];
  if (options.temperature == 0 || !std::isfinite(top)) {
    size_t best = 0;  // argmax_rows: NaNs skipped, 0 when every logit is NaN
    bool found = false;
    for (size_t i = 0; i < n; ++i)
      if (!std::isnan(logits[i]) && (!found || logits[i] > logits[best])) best = i, found = true;
    p[best] = 1;
    return p;
  }
  const size_t keep = options.top_k > 0 ? std::min(n, size_t(options.top_k)) : n;
  std::vector<double> w(keep);
  double total = 0;
  for (size_t j = 0; j < keep; ++j) total += w[j] = std::exp((v[order[j]] - top) / options.temperature);
  size_t m = 0;
  double mass = 0;
  while (m < keep && (m == 0 || mass < options.top_p * total)) mass += w[m++];
  for (size_t j = 0; j < m; ++j) p[order[j]] = w[j] / mass;
  return p;
}

// Upper quantile of chi-square with `df` degrees of freedom at tail 1e-6 (Wilson-Hilferty; for df = 1
// and 2 it overstates the exact quantile, so the check only gets safer).
inline double chi_square_limit(int64_t df) {
  constexpr double kZ = 4.753;  // standard normal upper 1e-6 quantile
  const double a = 2.0 / (9.0 * double(df));
  return double(df) * std::pow(1 - a + kZ * std::sqrt(a), 3);
}

// What is wrong with counts of drawn tokens as draws from probabilities p ("" when nothing): a token
// of probability 0 drawn, or Pearson's chi-square over bins (tokens pooled from the most likely down
// until a bin expects >= 20 draws) at or above its 1 - 1e-6 quantile, which a correct sampler reaches
// once in a million checks.
inline std::string distribution_mismatch(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  if (counts.size() != p.size()) return "counts of " + std::to_string(counts.size()) + " tokens";
  const int64_t draws = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] == 0 && counts[i] != 0) return "token " + std::to_string(i) + ", outside the kept set, was drawn";
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  std::vector<double> expected, observed;
  double e = 0, o = 0;
  for (size_t i : order) {
    if (p[i] == 0) break;
    e += p[i] * double(draws);
    o += double(counts[i]);
    if (e >= 20) expected.push_back(e), observed.push_back(o), e = 0, o = 0;
  }
  if (e > 0 || o > 0) {  // the tail joins the last bin
    if (expected.empty()) expected.push_back(0), observed.push_back(0);
    expected.back() += e, observed.back() += o;
  }
  if (expected.size() < 2) return "";  // one bin: the zero-probability check says it all
  double chi2 = 0;
  for (size_t b = 0; b < expected.size(); ++b)
    chi2 += (observed[b] - expected[b]) * (observed[b] - expected[b]) / expected[b];
  const int64_t df = int64_t(expected.size()) - 1;
  if (chi2 < chi_square_limit(df)) return "";
  return "chi-square " + std::to_string(chi2) + " >= " + std::to_string(chi_square_limit(df)) + " over " +
         std::to_string(expected.size()) + " bins of " + std::to_string(draws) + " draws";
}

inline void expect_distribution(const std::vector<int64_t>& counts, const std::vector<double>& p,
                                const std::string& what) {
  const std::string mismatch = distribution_mismatch(counts, p);
  EXPECT_TRUE(mismatch.empty()) << what << ": " << mismatch;
}

// Awkward rows: a peaked row (a few large logits over a spread of small ones), a flat row, a row with
// tied maxima and -inf entries. Values from Philox, so every run sees the same rows.
inline std::vector<float> peaked_row(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 2.0f * philox::normal(seed, uint64_t(i));
  for (int64_t j = 0; j < std::min<int64_t>(n, 5); ++j)
    v[size_t((j * 7919) % n)] = 9.0f - float(j);  // a handful of likely tokens
  return v;
}
inline std::vector<float> flat_row(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.25f); }
inline std::vector<float> tied_row(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(int(philox::draw(seed, uint64_t(i), 0).v[0] % 6)) * 0.5f;
  for (int64_t i = 3; i < n; i += 11) v[size_t(i)] = -INFINITY;
  if (n > 2) v[1] = v[size_t(n - 1)] = 3.0f;  // tied maxima, the later one last in the row
  return v;
}

}  // namespace fathom::test
