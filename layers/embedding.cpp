#include "layers/embedding.h"

#include "autograd/ops.h"

namespace fathom {

Embedding::Embedding(int64_t vocab_size, int64_t dim, ParameterInit init) {
  init.weight_decay = false;
  weight_ = add_parameter("weight", {vocab_size, dim}, init);
}

Variable Embedding::forward(const Tensor& ids) const { return embedding(ids, weight_); }

}  // namespace fathom
