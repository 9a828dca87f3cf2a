#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fathom {

double Schedule::lr(int64_t step) const {
  if (step < warmup_steps) return peak_lr * double(step + 1) / double(warmup_steps);
  if (type == "constant") return peak_lr;
  const int64_t decay_steps = std::max<int64_t>(total_steps - warmup_steps, 1);
  const double progress = std::clamp(double(step - warmup_steps) / double(decay_steps), 0.0, 1.0);
  const double floor = peak_lr * final_lr_fraction;
  if (type == "cosine") return floor + (peak_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
  if (type == "linear") return peak_lr - (peak_lr - floor) * progress;
  FATHOM_FAIL("unknown schedule type '", type, "' (expected cosine, linear or constant)");
}

}  // namespace fathom
