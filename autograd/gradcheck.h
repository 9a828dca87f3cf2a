// Numerical gradient check: compares the gradients that backward() computes with central
// differences, in double precision.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace fathom {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-6;  // an element passes when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
  uint64_t seed = 0x5eed;  // Philox seed of the random output weights w
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;  // over all checked elements
  double max_rel_error = 0;  // |analytic - numeric| / max(|numeric|, atol)
  int failed_input = -1;     // the first failing element: its input index and flat element index
  int64_t failed_element = -1;
  double analytic = 0;  // gradients at that element
  double numeric = 0;
  int64_t checked = 0;  // elements compared
  std::string message;  // a one-line summary naming the failure, if any
};

// Checks d/dx of sum(w * f(x)) for a fixed random w. Floating inputs must be F64; they become
// Variables that require grad. Integer inputs (ids, targets, positions) are passed through as
// Variables that do not. f must be deterministic and not keep state between calls.
GradcheckResult gradcheck(std::function<Variable(const std::vector<Variable>&)> f, std::vector<Tensor> inputs,
                          GradcheckOptions opts = {});

}  // namespace fathom
