// RMSNorm over the last dimension with a learned gain (initialised to 1).
#pragma once
#include "layers/module.h"

namespace fathom {

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps);
  Variable forward(const Variable& x) const;
  // residual + forward(x), in one pass (the post-norm block's residual add).
  Variable forward_onto(const Variable& residual, const Variable& x) const;
  const Variable& weight() const { return weight_; }
  double eps() const { return eps_; }

 private:
  Variable weight_;
  double eps_;
};

}  // namespace fathom
