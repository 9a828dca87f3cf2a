// The median the benchmarks report: of many timings, the middle one (the upper middle of an even count).
#pragma once
#include <algorithm>
#include <vector>

namespace fathom::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace fathom::bench
