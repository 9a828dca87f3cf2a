#include "layers/block.h"

#include <tuple>

#include "autograd/ops.h"
#include "layers/layer_kinds.h"

namespace fathom {

Block::Block(const ModelConfig& c, int64_t layer)
    : pre_norm_(c.norm == "pre"),
      d_model_(c.d_model),
      ffn_hidden_(c.ffn_hidden),
      mixer_(make_token_mixer(c, layer)),
      mlp_(c),
      attn_norm_(c.d_model, c.norm_eps),
      ffn_norm_(c.d_model, c.norm_eps) {
  add_child("self_attn", *mixer_);
  add_child("mlp", mlp_);
  if (pre_norm_) {
    add_child("input_layernorm", attn_norm_);
    add_child("post_attention_layernorm", ffn_norm_);
  } else {
    add_child("post_attention_layernorm", attn_norm_);
    add_child("post_feedforward_layernorm", ffn_norm_);
  }
  if (c.options.get<MoDAConfig>().extra_attention_writer()) {
    attn_depth_kv_ = std::make_unique<DepthKVProjection>(c);
    add_child("self_attn.depth_kv", *attn_depth_kv_);
  }
  if (c.options.get<MoDAConfig>().ffn_writer()) {
    ffn_depth_kv_ = std::make_unique<DepthKVProjection>(c);
    add_child("mlp.depth_kv", *ffn_depth_kv_);
  }
}

Variable Block::forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const {
  return run({.x = x}, inputs, report, /*hand_on=*/false).x;
}

LayerStream Block::forward_stream(const LayerStream& in, const MixerInputs& inputs, const LayerReport& report) const {
  return run(in, inputs, report, residual_step_across_layers_choice() == Fusion::fused);
}

LayerStream Block::run(const LayerStream& in, const MixerInputs& inputs, const LayerReport& report,
                       bool hand_on) const {
  DepthStream* depth = inputs.depth;
  const bool write = depth && inputs.write_depth;
  MixerInputs mixer_inputs = inputs;
  mixer_inputs.write_depth = write && !attn_depth_kv_;
  // A stream handed on untaken: its step inside the mixer's first launch where the mixer allows. Post-norm the
  // stream, which the mixer reads, is that launch's h (MoDA's attention-side writer reads it too); pre-norm the
  // launch keeps the normalised stream to itself, so not where that writer reads it.
  FATHOM_CHECK(in.taken() || (in.norm == nullptr) == pre_norm_, "block: a ", pre_norm_ ? "post" : "pre",
               "-norm stream handed on untaken to a ", pre_norm_ ? "pre" : "post", "-norm block");
  const ResidualStep step_kind = pre_norm_ ? ResidualStep::pre_norm : ResidualStep::post_norm;
  Variable x, attn_in, attn_out;
  if (!in.taken() && (!pre_norm_ || !(write && attn_depth_kv_)))
    if (auto stepped = mixer_->forward_after_residual_step(step_kind, in.residual, in.out,
                                                           pre_norm_ ? attn_norm_ : *in.norm, mixer_inputs, report))
      std::tie(x, attn_out) = *stepped;
  // Otherwise the step as its own launch; pre-norm with the input norm (LayerStream::take_normed, which at a few rows
  // adds, then normalises). Sublayer inputs: the normalised stream in pre-norm (none needed where the q/k/v launch
  // normalised it), the stream itself in post-norm.
  if (!x.defined()) {
    if (pre_norm_)
      std::tie(x, attn_in) = in.take_normed(attn_norm_);
    else
      x = in.take();
  }
  if (!pre_norm_) attn_in = x;
  if (!attn_out.defined()) attn_out = mixer_->forward(attn_in, mixer_inputs, report);
  if (write && attn_depth_kv_) attn_depth_kv_->write(*depth, attn_in, inputs);
  // The residual step, in the MLP's first launch where a decoding step allows it and nothing else reads the
  // MLP's input (MoDA's FFN writer does).
  const RMSNorm& step_norm = pre_norm_ ? ffn_norm_ : attn_norm_;
  std::optional<std::pair<Variable, Variable>> stepped;
  if (!(write && ffn_depth_kv_))
    stepped = mlp_.forward_after_residual_step(step_kind, x, attn_out, step_norm);
  Variable h, ffn_out;
  if (stepped) {
    std::tie(h, ffn_out) = *stepped;
  } else {
    // Post-norm: the mixer's projections keep x and the norm keeps attn_out, so selective recompute
    // rebuilds h from them rather than keeping it for the FFN's projections.
    // Pre-norm: h and the FFN's normalised input, in one pass where nothing records a gradient.
    Variable ffn_in;
    if (pre_norm_) {
      std::tie(h, ffn_in) = step_norm.forward_after_add(x, attn_out);
    } else {
      h = step_norm.forward_onto(x, attn_out, true);
      ffn_in = h;
    }
    if (write && ffn_depth_kv_) ffn_depth_kv_->write(*depth, ffn_in, inputs);
    ffn_out = mlp_.forward(ffn_in);
  }
  if (hand_on) return {.residual = h, .out = ffn_out, .norm = pre_norm_ ? nullptr : &ffn_norm_};
  return {.x = pre_norm_ ? add(h, ffn_out) : ffn_norm_.forward_onto(h, ffn_out)};
}

LayerCost Block::cost(const CostQuery& query) const {
  LayerCost c = mixer_->cost(query);
  const int64_t d = d_model_, f = ffn_hidden_;
  // Residual-width tensors: the block input and the sublayer outputs (post-norm) or the normalised
  // inputs (pre-norm): four either way. SwiGLU's gate and up, and its output (the down projection's input).
  c.saved_elements += 4 * d + 3 * f;
  c.saved_stats += 2;  // the two norms' rstd
  // Selective recompute rebuilds SwiGLU's output, and the pre-norm block's normalised inputs or the
  // post-norm block's stream after attention.
  c.rebuilt_elements += f + (pre_norm_ ? 2 * d : d);
  for (const Parameter& p : parameters()) c.weight_flops += 6.0 * double(p.var.shape().numel());
  return c;
}

int64_t Block::depth_slots_written() const {
  return (attn_depth_kv_ ? 1 : mixer_->depth_slots_written()) + (ffn_depth_kv_ ? 1 : 0);
}

}  // namespace fathom
