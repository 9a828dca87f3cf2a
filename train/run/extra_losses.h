// Losses a caller adds to a micro-batch's output before the objective weighs it (distillation's
// teacher terms, train/distill/distill_objective.h), given the model and the batch's inputs on the device.
#pragma once
#include <functional>

#include "layers/decoder.h"

namespace fathom {

using ExtraLosses = std::function<void(const Decoder& model, const Tensor& inputs, ModelOutput& output)>;

}  // namespace fathom
