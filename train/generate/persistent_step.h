// A decoding step of one sequence through the persistent kernel (kernels/decode_step/persistent_decode.h): the
// token's embedding and RoPE angles, then every layer and the LM head in one launch, then the state's counts one
// position on, as Decoder::decode moves them. DecodeStep takes it where FATHOM_PERSISTENT_DECODE is on and the
// model, the state and the device fit; the logits are close to the layer-by-layer step's, not the same bits.
#pragma once
#include <memory>
#include <string>

#include "kernels/decode_step/persistent_decode.h"
#include "layers/decoder.h"

namespace fathom {

class PersistentStep {
 public:
  // The step for `model` decoding `state`, or null with why not in *reason: the choice is off, the state is not
  // one sequence on a GPU, a layer is not plain attention (MoDA, MoD, DSLA), the linears run in FP8, or the kernel
  // does not fit.
  static std::unique_ptr<PersistentStep> make(const Decoder& model, DecodeState& state, std::string* reason);

  // The logits [1, vocab] of ids [1, 1] (I32, on the state's device) at the state's position; the state then
  // holds one more position.
  Tensor logits(const Tensor& ids);

 private:
  PersistentStep(const Decoder& model, DecodeState& state, Variable embedding_table, PersistentDecodeModel weights);
  const Decoder& model_;
  DecodeState& state_;
  Variable embedding_table_;
  PersistentDecode kernel_;
};

}  // namespace fathom
