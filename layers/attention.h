// OLMo2 self-attention, the "attention" layer kind: q/k/v projections, QK-norm over the FULL
// projected width (not per head), RoPE, causal GQA softmax attention, output projection; with a MoDA
// depth stream the same softmax also reads earlier layers' slots at each token.
#pragma once
#include <memory>

#include "layers/moda_config.h"
#include "layers/projected_mixer.h"

namespace fathom {

// The kind's name in model.layers, and its tap: the mean entropy of its softmax over heads and query
// positions (distillation ranks layers by it).
inline constexpr char kAttentionKind[] = "attention";
inline constexpr char kAttentionEntropyTap[] = "attention_entropy";

struct LayerKind;
// Its registration (layers/layer_kinds.h).
LayerKind attention_layer_kind();

class Attention : public ProjectedMixer {
 public:
  explicit Attention(const ModelConfig& config);
  // x [B, T, d_model]. With a depth stream the softmax also reads the most recent written slots (all,
  // or moda.max_slots of them), and with write_depth this layer's own K and V go into the next slot.
  // The K is the one this layer used (after QK-norm and RoPE) with moda.depth_key: writer; with
  // reader it is the raw projection, and this layer reads every depth key through its own k-norm (no
  // RoPE).
  Variable forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const override;
  // Decoding: the previous block's last residual step inside the q/k/v launch (TokenMixer says what it returns).
  std::optional<std::pair<Variable, Variable>> forward_after_residual_step(ResidualStep kind, const Variable& residual,
                                                                           const Variable& sublayer_out,
                                                                           const RMSNorm& norm,
                                                                           const MixerInputs& inputs,
                                                                           const LayerReport& report) const override;
  // Kept for backward: q and k after projection (when QK-norm keeps them) and after RoPE, v, the
  // output (o_proj's input); the norms' rstd and the lse per query head. A MoDA reader that leaves
  // weights (autograd/depth_stream.h) also keeps q, dO and two fp32 weights per head and read slot.
  LayerCost cost(const CostQuery& query) const override;
  int64_t depth_slots_written() const override { return moda_.enabled() ? 1 : 0; }
  // A KV cache [batch, n_kv_heads, capacity, head_dim] for K and for V (kernels/attention/kv_cache.h). MoDA
  // adds nothing to it: a token reads only its own token's depth slots, which each decoding step
  // writes afresh, so no earlier token's slots are ever read again.
  std::unique_ptr<MixerCache> make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const override;

 private:
  // forward from the q, k and v projections on.
  Variable attend(std::vector<Variable> qkv, const MixerInputs& inputs, const LayerReport& report) const;

  double rope_theta_;
  RopeScaling rope_scaling_;
  MoDAConfig moda_;
};

}  // namespace fathom
