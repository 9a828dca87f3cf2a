// Learning-rate schedules: linear warmup, then cosine or linear decay to a floor, or constant.
#pragma once
#include <cstdint>
#include <string>

namespace fathom {

struct Schedule {
  std::string type = "cosine";  // cosine | linear | constant
  double peak_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double final_lr_fraction = 0.1;  // floor as a fraction of the peak

  // Learning rate for 0-based step `step` (the update that makes step + 1 steps in total).
  double lr(int64_t step) const;
};

}  // namespace fathom
