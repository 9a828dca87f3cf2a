#include "train/generate/persistent_step.h"

#include <cmath>
#include <map>
#include <utility>

#include "autograd/ops.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/rope/rope.h"
#include "layers/attention.h"
#include "layers/moda_config.h"

namespace fathom {

namespace {

// The decoder's weights and caches as the kernel takes them, or why they cannot be.
std::pair<PersistentDecodeModel, std::string> persistent_weights(const Decoder& model, const DecodeState& state) {
  const ModelConfig& c = model.config();
  PersistentDecodeModel m;
  for (int64_t i = 0; i < c.n_layers; ++i)
    if (c.layer_kind(i) != kAttentionKind) return {m, "layer " + std::to_string(i) + " is " + c.layer_kind(i)};
  if (c.options.get<MoDAConfig>().enabled()) return {m, "the model reads MoDA depth slots"};
  if (state.batch != 1) return {m, "the batch holds " + std::to_string(state.batch) + " sequences, not one"};
  std::map<std::string, Tensor> values;
  for (const Parameter& p : model.parameters()) values[p.name] = p.var.compute_value();
  std::string missing;
  const auto weight = [&](const std::string& name) {
    const auto it = values.find(name);
    if (it == values.end() && missing.empty()) missing = name;
    return it == values.end() ? Tensor() : it->second;
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

}  // namespace

std::unique_ptr<PersistentStep> PersistentStep::make(const Decoder& model, DecodeState& state, std::string* reason) {
  std::string why;
  if (persistent_decode_choice() == Toggle::off)
    why = "FATHOM_PERSISTENT_DECODE is off";
  else if (!state.device_lengths.device().is_cuda())
    why = "the persistent step is for GPU decoding";
  std::pair<PersistentDecodeModel, std::string> weights;
  if (why.empty()) {
    weights = persistent_weights(model, state);
    why = weights.second;
  }
  if (reason) *reason = why;
  if (!why.empty()) return nullptr;
  return std::unique_ptr<PersistentStep>(new PersistentStep(model, state, std::move(weights.first)));
}

PersistentStep::PersistentStep(const Decoder& model, DecodeState& state, PersistentDecodeModel weights)
    : model_(model), state_(state), kernel_(std::move(weights)) {
  for (const Parameter& p : model.parameters())
    if (p.name == "model.embed_tokens.weight") embedding_table_ = p.var;
}

Tensor PersistentStep::logits(const Tensor& ids) {
  FATHOM_CHECK(ids.numel() == 1, "persistent decode step: ids ", describe(ids), " are not one token");
  FATHOM_CHECK(state_.longest() + 1 <= state_.capacity, "decode: 1 more position after ", state_.longest(),
               " exceeds the cache's capacity of ", state_.capacity);
  const ModelConfig& c = model_.config();
  const Tensor angles =
      rope_angles(positions_after(state_.device_lengths, 1), c.head_dim(), c.rope_theta, c.rope_scaling);
  const Variable x = embedding(ids.view({1}), embedding_table_);
  Tensor logits = kernel_.step(x.value(), angles, state_.device_lengths);
  std::vector<int64_t> after = state_.lengths;
  for (int64_t& n : after) ++n;
  state_.set_lengths(after);
  advance_positions(state_.device_lengths, 1);
  return logits;
}

}  // namespace fathom
