// A decoder block: a token mixer (the layer's kind: attention by default, layers/layer_kinds.h) and
// the SwiGLU MLP, in one of two norm placements:
//   post (OLMo2 "reordered norm"): h = x + norm_attn(mix(x));  out = h + norm_ffn(mlp(h))
//   pre  (classic / Llama):        h = x + mix(norm_attn(x));  out = h + mlp(norm_ffn(h))
// Norm names follow HF: OLMo2 uses post_attention_layernorm / post_feedforward_layernorm on the
// sublayer outputs; Llama uses input_layernorm and a post_attention_layernorm that is its PRE-MLP norm.
// The mixer's parameters live under "self_attn" whatever its kind, so a teacher's q/k/v/o load into it.
#pragma once
#include <memory>

#include "layers/decoder_layer.h"
#include "layers/depth_kv.h"
#include "layers/mlp.h"
#include "layers/token_mixer.h"

namespace fathom {

class Block : public DecoderLayer {
 public:
  Block(const ModelConfig& config, int64_t layer);
  // With a depth stream (MoDA), the mixer reads the slots of earlier blocks; with
  // inputs.write_depth the block then writes its own slots (the last block's would never be read).
  Variable forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const override;
  // A decoding step's forward: the block takes a stream handed on untaken inside its q/k/v launch where its mixer
  // allows, and with FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused hands its own last step on (layers/layer_stream.h).
  LayerStream forward_stream(const LayerStream& in, const MixerInputs& inputs,
                             const LayerReport& report) const override;
  // The mixer's cost plus the block's own: its input, the two sublayer outputs or normalised inputs,
  // SwiGLU's gate, up and output, and the two norms' rstd.
  LayerCost cost(const CostQuery& query) const override;
  // MoDA slots the block writes when it writes: the attention side's and the FFN writer's.
  int64_t depth_slots_written() const override;
  // The mixer's decoding state (the MLP keeps none).
  std::unique_ptr<MixerCache> make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const override {
    return mixer_->make_cache(batch, capacity, dtype, device);
  }
  const TokenMixer& mixer() const { return *mixer_; }

 private:
  // forward on a stream, handing on the last step untaken where hand_on.
  LayerStream run(const LayerStream& in, const MixerInputs& inputs, const LayerReport& report, bool hand_on) const;

  bool pre_norm_;
  int64_t d_model_, ffn_hidden_;
  std::unique_ptr<TokenMixer> mixer_;
  MLP mlp_;
  RMSNorm attn_norm_, ffn_norm_;
  std::unique_ptr<DepthKVProjection> attn_depth_kv_, ffn_depth_kv_;  // MoDA writers, by variant
};

}  // namespace fathom
