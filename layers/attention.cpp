#include "layers/attention.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/kv_cache.h"
#include "layers/layer_kinds.h"

namespace fathom {

namespace {

struct KVCache final : MixerCache {
  Tensor k, v;       // [B, Hk, capacity, d]
  int64_t held = 0;  // positions written
  size_t bytes() const override { return k.nbytes() + v.nbytes(); }
  size_t bytes_per_position() const override { return bytes() / size_t(k.dim(2)); }
  int64_t length() const override { return held; }
  // With MixerInputs::device_past (GPU decoding) the writes and reads take their position from it.
  bool replayable() const override { return true; }
  void set_length(int64_t positions) override { held = positions; }
};

}  // namespace

LayerKind attention_layer_kind() {
  return {.name = kAttentionKind,
          .make_mixer = [](const ModelConfig& c, int64_t) -> std::unique_ptr<TokenMixer> {
            return std::make_unique<Attention>(c);
          },
          .reads_depth = true,
          .taps = {kAttentionEntropyTap}};
}

Attention::Attention(const ModelConfig& c)
    : ProjectedMixer(c), rope_theta_(c.rope_theta), rope_scaling_(c.rope_scaling), moda_(c.options.get<MoDAConfig>()) {}

Variable Attention::forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const {
  const Tensor& positions = inputs.positions;
  DepthStream* depth = inputs.depth;
  const bool reader_depth_keys = moda_.depth_key == DepthKey::reader;
  const int64_t B = x.dim(0), T = x.dim(1);
  Variable q = q_proj_.forward(x);
  Variable k = k_proj_.forward(x);
  Variable v = v_proj_.forward(x);
  // With reader depth keys this layer's slot holds its raw K, before the k-norm and RoPE.
  const Variable raw_k = reshape(k, {B, T, n_kv_heads_, head_dim_});
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = rope(reshape(q, {B, T, n_heads_, head_dim_}), positions, rope_theta_, rope_scaling_);
  k = rope(reshape(k, {B, T, n_kv_heads_, head_dim_}), positions, rope_theta_, rope_scaling_);
  v = reshape(v, {B, T, n_kv_heads_, head_dim_});
  const double scale = 1.0 / std::sqrt(double(head_dim_));
  const int64_t written = depth ? depth->slots_written() : 0;
  DepthKeyNorm key_norm;
  if (depth && reader_depth_keys && k_norm_) key_norm = {k_norm_->weight(), k_norm_->eps()};
  Variable o;
  // Decoding: append this step's keys and values; a first step (the prompt) attends as in training,
  // later ones read the cache.
  KVCache* cache = static_cast<KVCache*>(inputs.cache);
  const int64_t past = cache ? cache->held : 0;
  // On a GPU the position comes from the device (inputs.device_past, equal to `past`), so the
  // step can be replayed as a CUDA graph at later positions.
  const Tensor* device_past = cache ? inputs.device_past : nullptr;
  if (cache) {
    FATHOM_CHECK(!x.requires_grad(), "decoding keeps no gradient; run it under NoGrad");
    FATHOM_CHECK(past + T <= cache->k.dim(2), "decode: ", T, " more positions after ", past,
                 " exceed the KV cache's capacity of ", cache->k.dim(2));
    if (device_past) {
      kv_cache_write(cache->k, k.value().to(cache->k.dtype()), *device_past);
      kv_cache_write(cache->v, v.value().to(cache->v.dtype()), *device_past);
    } else {
      kv_cache_write(cache->k, k.value().to(cache->k.dtype()), past);
      kv_cache_write(cache->v, v.value().to(cache->v.dtype()), past);
    }
    cache->held += T;
  }
  if (report.wants(kAttentionEntropyTap)) {
    FATHOM_CHECK(!depth, "attention entropy taps read the sequence softmax only; this model has MoDA depth reads");
    report.measure(kAttentionEntropyTap, attention_entropy(q.value(), k.value(), scale));
  }
  const int64_t begin = moda_first_read_slot(written, moda_.max_slots);
  if (past > 0) {
    const DepthSlots slots = depth ? depth->read(begin, written, key_norm) : DepthSlots{};
    const DType kernel_dtype = cache->k.dtype();
    const Tensor q_value = q.value().to(kernel_dtype);
    o = Variable((device_past ? decode_attention(q_value, cache->k, cache->v, *device_past, slots, scale)
                              : decode_attention(q_value, cache->k, cache->v, cache->held, slots, scale))
                     .to(q.dtype()));
  } else if (depth) {
    o = depth->attend(q, k, v, begin, written, scale, key_norm);
  } else {
    o = attention(q, k, v, scale);
  }
  if (depth && inputs.write_depth) depth->write(written, reader_depth_keys ? raw_k : k, v);
  return o_proj_.forward(reshape(o, {B, T, n_heads_ * head_dim_}));
}

LayerCost Attention::cost(const CostQuery& query) const {
  const int64_t q = n_heads_ * head_dim_, kv = n_kv_heads_ * head_dim_, qk = q_norm_ ? 1 : 0;
  LayerCost c;
  c.saved_elements = (1 + qk) * q + q + (1 + qk) * kv + kv;
  // Selective recompute rebuilds RoPE's outputs from the normed q and k that QK-norm keeps anyway.
  c.rebuilt_elements = qk ? q + kv : 0;
  c.saved_stats = 2 * qk + n_heads_;
  // Scores q.k and the weighted sum of values, causal: 6 d T per token as OLMo-core and PaLM count.
  c.extra_flops = 6.0 * double(q) * double(query.seq_len);
  const bool reader_keys = moda_.depth_key == DepthKey::reader;
  if (moda_.enabled() && query.depth_slots_before > 0 &&
      depth_reader_leaves_weights(n_heads_ / n_kv_heads_, reader_keys)) {
    const int64_t read = query.depth_slots_before - moda_first_read_slot(query.depth_slots_before, moda_.max_slots);
    c.depth_elements = 2 * q;  // q and dO
    c.depth_stats = 2 * read * n_heads_;
  }
  return c;
}

std::unique_ptr<MixerCache> Attention::make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const {
  auto cache = std::make_unique<KVCache>();
  cache->k = Tensor::empty({batch, n_kv_heads_, capacity, head_dim_}, dtype, device);
  cache->v = Tensor::empty({batch, n_kv_heads_, capacity, head_dim_}, dtype, device);
  return cache;
}

}  // namespace fathom
