#include "train/generate/persistent_step.h"

#include <cmath>
#include <map>
#include <utility>

#include "autograd/ops.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/rope/rope.h"
#include "layers/attention.h"
#include "layers/linear.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"

namespace fathom {

namespace {

// Why the kernel cannot decode this model's blocks ("" when it can): it knows plain attention blocks only.
std::string unfit_blocks(const ModelConfig& c) {
  for (int64_t i = 0; i < c.n_layers; ++i)
    if (c.layer_kind(i) != kAttentionKind) return "layer " + std::to_string(i) + " is " + c.layer_kind(i);
  if (c.options.get<MoDAConfig>().enabled()) return "the model reads MoDA depth slots";
  if (c.options.get<ModConfig>().enabled()) return "the model routes tokens past blocks (MoD)";
  return "";
}

// The decoder's parameters by name.
using Parameters = std::map<std::string, Variable>;

// The decoder's weights and caches as the kernel takes them, or why they cannot be.
std::pair<PersistentDecodeModel, std::string> persistent_weights(const Decoder& model, const Parameters& parameters,
                                                                 const DecodeState& state) {
  const ModelConfig& c = model.config();
  PersistentDecodeModel m;
  std::string missing;
  const auto weight = [&](const std::string& name) {
    const auto it = parameters.find(name);
    if (it == parameters.end() && missing.empty()) missing = name;
    return it == parameters.end() ? Tensor() : it->second.compute_value();
  };
  const bool pre = c.norm == "pre";
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string at = "model.layers." + std::to_string(i) + ".";
    PersistentDecodeLayer y;
    y.q = weight(at + "self_attn.q_proj.weight"), y.k = weight(at + "self_attn.k_proj.weight");
    y.v = weight(at + "self_attn.v_proj.weight"), y.o = weight(at + "self_attn.o_proj.weight");
    y.gate = weight(at + "mlp.gate_proj.weight"), y.up = weight(at + "mlp.up_proj.weight");
    y.down = weight(at + "mlp.down_proj.weight");
    if (c.qk_norm) y.q_norm = weight(at + "self_attn.q_norm.weight"), y.k_norm = weight(at + "self_attn.k_norm.weight");
    y.attn_norm = weight(at + (pre ? "input_layernorm.weight" : "post_attention_layernorm.weight"));
    y.ffn_norm = weight(at + (pre ? "post_attention_layernorm.weight" : "post_feedforward_layernorm.weight"));
    const auto kv = state.layers[size_t(i)]->key_value();
    if (!kv) return {m, "layer " + std::to_string(i) + " keeps no KV cache"};
    y.cache_k = kv->first, y.cache_v = kv->second;
    m.layers.push_back(std::move(y));
  }
  m.final_norm = weight("model.norm.weight");
  if (!missing.empty()) return {m, "the model has no parameter " + missing};
  m.head = model.head_weight().compute_value();
  m.heads = c.n_heads, m.kv_heads = c.n_kv_heads, m.head_dim = c.head_dim();
  m.pre_norm = pre;
  m.norm_eps = c.norm_eps;
  m.scale = 1.0 / std::sqrt(double(c.head_dim()));
  std::string why = persistent_decode_unfit(m);
  return {std::move(m), std::move(why)};
}

// Why the step cannot decode `state` of `model` ("" when it can), in the order a user would fix them.
std::string unfit_step(const Decoder& model, const DecodeState& state) {
  if (persistent_decode_choice() == Toggle::off) return "FATHOM_PERSISTENT_DECODE is off";
  if (std::string why = unfit_blocks(model.config()); !why.empty()) return why;
  if (any_fp8_linear(model))
    return "the model's linears run in FP8 (train.precision fp8); the kernel reads BF16 weights";
  if (state.batch != 1) return "the batch holds " + std::to_string(state.batch) + " sequences, not one";
  if (!state.device_lengths.device().is_cuda()) return "the persistent step is for GPU decoding";
  return "";
}

constexpr char kEmbedding[] = "model.embed_tokens.weight";

}  // namespace

std::unique_ptr<PersistentStep> PersistentStep::make(const Decoder& model, DecodeState& state, std::string* reason) {
  std::string why = unfit_step(model, state);
  Parameters parameters;
  std::pair<PersistentDecodeModel, std::string> weights;
  if (why.empty()) {
    for (const Parameter& p : model.parameters()) parameters.emplace(p.name, p.var);
    if (!parameters.contains(kEmbedding)) why = std::string("the model has no parameter ") + kEmbedding;
  }
  if (why.empty()) {
    weights = persistent_weights(model, parameters, state);
    why = weights.second;
  }
  if (reason) *reason = why;
  if (!why.empty()) return nullptr;
  return std::unique_ptr<PersistentStep>(
      new PersistentStep(model, state, parameters.at(kEmbedding), std::move(weights.first)));
}

PersistentStep::PersistentStep(const Decoder& model, DecodeState& state, Variable embedding_table,
                               PersistentDecodeModel weights)
    : model_(model), state_(state), embedding_table_(std::move(embedding_table)), kernel_(std::move(weights)) {}

Tensor PersistentStep::logits(const Tensor& ids) {
  FATHOM_CHECK(ids.numel() == 1, "persistent decode step: ids ", describe(ids), " are not one token");
  state_.check_room_for(1);
  const ModelConfig& c = model_.config();
  const Tensor angles =
      rope_angles(positions_after(state_.device_lengths, 1), c.head_dim(), c.rope_theta, c.rope_scaling);
  const Variable x = embedding(ids.view({1}), embedding_table_);
  Tensor logits = kernel_.step(x.value(), angles, state_.device_lengths);
  state_.count_one_more_position();
  advance_positions(state_.device_lengths, 1);
  return logits;
}

}  // namespace fathom
