#include "layers/linear.h"

#include "autograd/ops.h"

namespace fathom {

Linear::Linear(int64_t in_features, int64_t out_features, ParameterInit init)
    : weight_(add_parameter("weight", {out_features, in_features}, init)) {}

Variable Linear::forward(const Variable& x) const { return linear(x, weight_); }

}  // namespace fathom
