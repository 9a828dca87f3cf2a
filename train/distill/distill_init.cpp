#include "train/distill/distill_init.h"

#include <map>

#include "core/error.h"

namespace fathom {

void overlay_weights(TensorMap& weights, const TensorMap& source, const std::string& source_name) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < weights.size(); ++i) index[weights[i].first] = i;
  for (const auto& [name, tensor] : source) {
    const auto it = index.find(name);
    FATHOM_CHECK(it != index.end(), source_name, " has tensor '", name,
                 "', which the converted model does not: the teacher's layers must match the student's");
    Tensor& target = weights[it->second].second;
    FATHOM_CHECK(target.shape() == tensor.shape(), source_name, " tensor '", name, "' is ", describe(tensor),
                 ", the converted model's ", describe(target));
    target = tensor.to(target.device()).to(target.dtype());
  }
}

}  // namespace fathom
