#include "kernels/sampling/sampling_options.h"

#include <cmath>

#include "core/error.h"

namespace fathom {

void SamplingOptions::validate() const {
  FATHOM_CHECK(std::isfinite(temperature) && temperature >= 0, "--temperature must be >= 0 (0 is greedy), got ",
               temperature);
  FATHOM_CHECK(top_k >= 0, "--top-k must be >= 0 (0 keeps every token), got ", top_k);
  FATHOM_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got ", top_p);
}

}  // namespace fathom
