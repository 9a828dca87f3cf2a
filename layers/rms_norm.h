// RMSNorm over the last dimension with a learned gain (initialised to 1).
#pragma once
#include <utility>

#include "layers/module.h"

namespace fathom {

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps);
  Variable forward(const Variable& x) const;
  // residual + forward(x), in one pass (the post-norm block's residual add). With
  // rebuild_from_inputs, selective recompute rebuilds the sum from residual and x instead of keeping
  // it: for a residual that other nodes keep anyway.
  Variable forward_onto(const Variable& residual, const Variable& x, bool rebuild_from_inputs = false) const;
  // {residual + x, forward(residual + x)}: the pre-norm block's residual step, one pass where nothing
  // records a gradient.
  std::pair<Variable, Variable> forward_after_add(const Variable& residual, const Variable& x) const;
  const Variable& weight() const { return weight_; }
  double eps() const { return eps_; }

 private:
  Variable weight_;
  double eps_;
};

}  // namespace fathom
