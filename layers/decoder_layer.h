// One layer of the decoder's stack: a Block, or a Mixture-of-Depths routed block that wraps one
// (layers/routed_block.h). The Decoder, the memory plan and MFU see only this interface.
#pragma once
#include <cstdint>
#include <memory>

#include "layers/layer_stream.h"
#include "layers/token_mixer.h"

namespace fathom {

class DecoderLayer : public Module {
 public:
  // x [B, T, d] -> [B, T, d].
  virtual Variable forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const = 0;
  // A decoding step's forward on a stream that may come, and go on, with a residual step not yet taken
  // (layers/layer_stream.h). This one takes the step first and hands on a taken stream.
  virtual LayerStream forward_stream(const LayerStream& in, const MixerInputs& inputs,
                                     const LayerReport& report) const {
    return {.x = forward(in.take(), inputs, report)};
  }
  // The layer's training cost per token of sequences of query.seq_len.
  virtual LayerCost cost(const CostQuery& query) const = 0;
  // MoDA slots the layer writes when it writes.
  virtual int64_t depth_slots_written() const = 0;
  // The layer's decoding state for `batch` sequences of up to `capacity` positions.
  virtual std::unique_ptr<MixerCache> make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const = 0;
  // Whether the decoder's train.recompute: block may re-run the whole layer from its input. A layer
  // that reports losses or state from its forward recomputes inside itself instead (set_recompute).
  virtual bool rerunnable() const { return true; }
  virtual void set_recompute(bool /*block*/) {}
};

}  // namespace fathom
