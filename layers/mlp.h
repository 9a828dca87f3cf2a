// SwiGLU feed-forward: down(silu(gate(x)) * up(x)).
#pragma once
#include "layers/linear.h"
#include "layers/model_config.h"

namespace fathom {

class MLP : public Module {
 public:
  explicit MLP(const ModelConfig& config);
  Variable forward(const Variable& x) const;

 private:
  Linear gate_proj_, up_proj_, down_proj_;
};

}  // namespace fathom
