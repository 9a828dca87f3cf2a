// Token embedding table; excluded from weight decay.
#pragma once
#include "layers/module.h"

namespace fathom {

class Embedding : public Module {
 public:
  Embedding(int64_t vocab_size, int64_t dim, ParameterInit init);
  Variable forward(const Tensor& ids) const;  // [...] -> [..., dim]
  const Variable& weight() const { return weight_; }

 private:
  Variable weight_;  // [vocab, dim]
};

}  // namespace fathom
