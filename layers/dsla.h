// Dual-state linear attention, the "dsla" layer kind (DESIGN.md 4.4, paper 004): the attention
// layer's q/k/v/o projections and QK-norm (same names, so a teacher's weights load), no RoPE, no
// softmax and no normaliser. Per query head, two gated states read the same k, v:
//   S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t,   o_t = (q_t / sqrt(d)) (gamma S1_t + (1 - gamma) S2_t)
// with log gates g = logsigmoid(W x + b) / 16 per key dimension, per query head, per state, and
// gamma = sigmoid(c) per layer or per head (dsla.gamma). dsla.states: 1 is one gated state (GLA).
// GQA: k and v keep the KV heads and serve the G query heads of their group. Decoding keeps the
// states, a constant d x d per head, instead of a KV cache.
#pragma once
#include <memory>

#include "layers/dsla_config.h"
#include "layers/projected_mixer.h"

namespace fathom {

// The kind's name in model.layers, and its loss term: asked of a two-state layer, the mean cosine
// similarity of its two gates' values per token and head (distillation's gate_cos).
inline constexpr char kDslaKind[] = "dsla";
inline constexpr char kGateCosLoss[] = "gate_cos";

struct LayerKind;
// Its registration (layers/layer_kinds.h).
LayerKind dsla_layer_kind();

// One state's log forget gates, g = logsigmoid(W x + b) / 16, in fp32: W [width, d_model], b [width].
class DslaGate : public Module {
 public:
  DslaGate(int64_t d_model, int64_t width, ParameterInit weight_init);
  Variable forward(const Variable& x) const;  // x [..., d_model] -> F32 [..., width]

 private:
  Variable weight_, bias_;
};

class Dsla : public ProjectedMixer {
 public:
  explicit Dsla(const ModelConfig& config);
  // x [B, T, d_model]. With a decoding state: the first call (the prompt) runs the chunked form and
  // keeps its final states; later calls advance the states by their tokens.
  Variable forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const override;
  // Kept for backward: q and k after projection (when QK-norm keeps them) and normalised, v, the
  // output (o_proj's input); the norms' rstd and the fp32 log gates. FLOPs beyond the weights': the
  // chunked form's intra-chunk scores and values and its inter-chunk state reads and updates.
  LayerCost cost(const CostQuery& query) const override;
  // The fp32 states [batch, n_heads, head_dim, head_dim], one or two: no bytes per position.
  std::unique_ptr<MixerCache> make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const override;

 private:
  int64_t states_;
  DslaGate gate1_;
  std::unique_ptr<DslaGate> gate2_;  // two states only
  Variable gamma_logit_;             // two states only: c, [1] (dsla.gamma: layer) or [n_heads]
};

}  // namespace fathom
