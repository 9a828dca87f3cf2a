#include "layers/attention.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_prologue.h"
#include "kernels/attention/kv_cache.h"
#include "layers/layer_kinds.h"

namespace fathom {

namespace {

struct KVCache final : MixerCache {
  Tensor k, v;                // [B, Hk, capacity, d]
  std::vector<int64_t> held;  // per sequence: positions written
  size_t bytes() const override { return k.nbytes() + v.nbytes(); }
  size_t bytes_per_position() const override { return bytes() / size_t(k.dim(2)); }
  int64_t length() const override { return *std::max_element(held.begin(), held.end()); }
  bool uniform() const {
    return std::all_of(held.begin(), held.end(), [&](int64_t n) { return n == held[0]; });
  }
  // With MixerInputs::device_past the writes and reads take each sequence's position from it.
  bool replayable() const override { return true; }
  void set_lengths(const std::vector<int64_t>& positions) override {
    FATHOM_CHECK(positions.size() == held.size(), "KV cache: ", positions.size(), " lengths for ", held.size(),
                 " sequences");
    held = positions;
  }
  // Sequence 0's keys and values, each head's one contiguous run, into row `row`.
  void copy_sequence(int64_t row, const MixerCache& single) override {
    const auto* one = dynamic_cast<const KVCache*>(&single);
    FATHOM_CHECK(one && one->k.dim(0) == 1, "KV cache: a sequence is taken from a one-sequence KV cache");
    const int64_t B = k.dim(0), Hk = k.dim(1), capacity = k.dim(2), d = k.dim(3), n = one->held[0];
    const int64_t one_capacity = one->k.dim(2);
    FATHOM_CHECK(row >= 0 && row < B, "KV cache: row ", row, " outside the batch of ", B);
    FATHOM_CHECK(
        one->k.dim(1) == Hk && one->k.dim(3) == d && one->k.dtype() == k.dtype() && one->k.device() == k.device(),
        "KV cache: ", describe(one->k), " does not fit ", describe(k), " (heads, head dim, dtype, device)");
    FATHOM_CHECK(n <= capacity, "KV cache: a sequence of ", n, " positions exceeds the capacity of ", capacity);
    for (auto [to, from] : {std::pair<Tensor*, const Tensor*>{&k, &one->k}, {&v, &one->v}})
      for (int64_t h = 0; h < Hk && n > 0; ++h)
        to->view({B * Hk * capacity, d})
            .narrow((row * Hk + h) * capacity, n)
            .copy_from(from->view({Hk * one_capacity, d}).narrow(h * one_capacity, n));
    held[size_t(row)] = n;
  }
  std::optional<std::pair<Tensor, Tensor>> key_value() const override { return std::pair{k, v}; }
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
  return attend(project_each(x, {&q_proj_, &k_proj_, &v_proj_}), inputs, report);
}

std::optional<std::pair<Variable, Variable>> Attention::forward_after_residual_step(ResidualStep kind,
                                                                                    const Variable& residual,
                                                                                    const Variable& sublayer_out,
                                                                                    const RMSNorm& norm,
                                                                                    const MixerInputs& inputs,
                                                                                    const LayerReport& report) const {
  std::optional<ResidualProjections> step = project_each_after_residual_step(kind, residual, sublayer_out, norm,
                                                                             {&q_proj_, &k_proj_, &v_proj_});
  if (!step) return std::nullopt;
  return std::pair{step->h, attend(std::move(step->ys), inputs, report)};
}

Variable Attention::attend(std::vector<Variable> qkv, const MixerInputs& inputs, const LayerReport& report) const {
  const Tensor& positions = inputs.positions;
  DepthStream* depth = inputs.depth;
  const bool reader_depth_keys = moda_.depth_key == DepthKey::reader;
  Variable q = std::move(qkv[0]), k = std::move(qkv[1]), v = std::move(qkv[2]);
  const int64_t B = q.dim(0), T = q.dim(1);
  const Tensor& angles = inputs.rope_angles->angles(positions, head_dim_, rope_theta_, rope_scaling_);
  const double scale = 1.0 / std::sqrt(double(head_dim_));
  // Decoding: append this step's keys and values; a first step (the prompt) attends as in training,
  // later ones read the cache.
  KVCache* cache = static_cast<KVCache*>(inputs.cache);
  // The positions come from inputs.device_past (each sequence's count, equal to cache->held), so a GPU
  // step can be replayed as a CUDA graph at later positions and the sequences of a ragged batch write
  // and read at their own lengths. Without it (MoD's one-sequence block caches) from the host.
  const Tensor* device_past = cache ? inputs.device_past : nullptr;
  const int64_t past = cache ? cache->length() : 0;  // the longest sequence's, before this step
  if (cache) {
    FATHOM_CHECK(!q.requires_grad(), "decoding keeps no gradient; run it under NoGrad");
    FATHOM_CHECK(past + T <= cache->k.dim(2), "decode: ", T, " more positions after ", past,
                 " exceed the KV cache's capacity of ", cache->k.dim(2));
  }
  // A token step of plain attention: QK-norm, RoPE and the cache writes in one launch, where chosen (and
  // that launch inside attention's, where chosen too: decode_prologue_attention).
  if (device_past && T == 1 && past > 0 && !depth && !report.wants(kAttentionEntropyTap) &&
      q.dtype() == cache->k.dtype() && decode_prologue_choice() == DecodePrologue::fused) {
    QkNorm norm;
    if (q_norm_)
      norm = {q_norm_->weight().compute_value(), k_norm_->weight().compute_value(), q_norm_->eps(), k_norm_->eps()};
    const Tensor o = decode_prologue_attention(
        q.value().view({B, 1, n_heads_, head_dim_}), k.value().view({B, 1, n_kv_heads_, head_dim_}),
        v.value().view({B, 1, n_kv_heads_, head_dim_}), norm, angles, cache->k, cache->v, *device_past, scale);
    for (int64_t& held : cache->held) held += 1;
    return o_proj_.forward(Variable(o.view({B, T, n_heads_ * head_dim_})));
  }
  // With reader depth keys this layer's slot holds its raw K, before the k-norm and RoPE.
  const Variable raw_k = reshape(k, {B, T, n_kv_heads_, head_dim_});
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = rope(reshape(q, {B, T, n_heads_, head_dim_}), angles);
  k = rope(reshape(k, {B, T, n_kv_heads_, head_dim_}), angles);
  v = reshape(v, {B, T, n_kv_heads_, head_dim_});
  const int64_t written = depth ? depth->slots_written() : 0;
  DepthKeyNorm key_norm;
  if (depth && reader_depth_keys && k_norm_) key_norm = {k_norm_->weight(), k_norm_->eps()};
  Variable o;
  if (cache) {
    if (device_past) {
      kv_cache_write(cache->k, k.value().to(cache->k.dtype()), *device_past);
      kv_cache_write(cache->v, v.value().to(cache->v.dtype()), *device_past);
    } else {
      FATHOM_CHECK(cache->uniform(),
                   "decode: the sequences of this KV cache hold different lengths; their positions must come from "
                   "MixerInputs::device_past");
      kv_cache_write(cache->k, k.value().to(cache->k.dtype()), past);
      kv_cache_write(cache->v, v.value().to(cache->v.dtype()), past);
    }
    for (int64_t& held : cache->held) held += T;
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
                              : decode_attention(q_value, cache->k, cache->v, past + T, slots, scale))
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
  cache->held.assign(size_t(batch), 0);
  cache->k = Tensor::empty({batch, n_kv_heads_, capacity, head_dim_}, dtype, device);
  cache->v = Tensor::empty({batch, n_kv_heads_, capacity, head_dim_}, dtype, device);
  return cache;
}

}  // namespace fathom
