// Bias-free Linear layer (OLMo2 has no biases anywhere).
#pragma once
#include "layers/module.h"

namespace fathom {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, ParameterInit init);
  Variable forward(const Variable& x) const;  // [..., in] -> [..., out]
  const Variable& weight() const { return weight_; }

 private:
  Variable weight_;  // [out, in], HF layout
};

}  // namespace fathom
