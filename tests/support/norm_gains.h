// Norm gains away from their initial 1, for tests in which a path normalising with the wrong norm must show.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layers/module.h"
#include "tests/support/op_test_util.h"

namespace fathom::test {

// A gain vector set to 1 plus a uniform draw from [-1, 1) of `seed`, wherever it lives.
inline void randomise_gain(Variable gain, uint64_t seed) {  // a handle: the copy shares the parameter's value
  const Shape& shape = gain.value().shape();
  std::vector<float> values = random_tensor(shape, DType::f32, seed).to_vector<float>();
  for (float& v : values) v += 1.f;
  gain.value().copy_from(Tensor::from_vector(values, shape));
}

// Every parameter of `model` whose name holds "norm" (block norms, QK-norms, the final norm) so set, seeded from 70
// up; a model with a compute copy must refresh it afterwards.
inline void randomise_norm_gains(const Module& model) {
  uint64_t seed = 70;
  for (const Parameter& p : model.parameters())
    if (p.name.find("norm") != std::string::npos) randomise_gain(p.var, seed++);
}

}  // namespace fathom::test
