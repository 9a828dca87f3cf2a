#include "layers/dsla.h"

#include <algorithm>

#include "autograd/divergences.h"
#include "autograd/ops.h"
#include "kernels/dsla/dsla.h"
#include "layers/layer_kinds.h"

namespace fathom {

namespace {

// g = logsigmoid(z) / 16: GLA's gate normaliser keeps the retention exp(g) near 1 (0.958 at z = 0).
constexpr double kGateScale = 1.0 / 16;

struct DslaCache final : MixerCache {
  DslaState state;  // s1, s2 [B, H, d, d] F32 (s2 undefined with one state)
  // The longest sequence's positions: 0 until a prompt has made the states (a state does not depend on
  // how many positions it summarises, so one count serves every sequence).
  int64_t length = 0;
  size_t bytes() const override { return state.s1.nbytes() + (state.s2.defined() ? state.s2.nbytes() : 0); }
  size_t bytes_per_position() const override { return 0; }
  // After the prompt the states stay where they are and each step updates them in place.
  bool replayable() const override { return length > 0; }
  void set_lengths(const std::vector<int64_t>& positions) override {
    length = positions.empty() ? 0 : *std::max_element(positions.begin(), positions.end());
  }
  // Sequence 0's states into row `row`: the states are the whole of what a sequence keeps.
  void copy_sequence(int64_t row, const MixerCache& single) override {
    const auto* one = dynamic_cast<const DslaCache*>(&single);
    FATHOM_CHECK(one && one->state.s1.defined() && one->state.s1.dim(0) == 1 && state.s1.defined(),
                 "dsla state: a sequence is taken from a one-sequence dsla state that has read a prompt");
    FATHOM_CHECK(row >= 0 && row < state.s1.dim(0), "dsla state: row ", row, " outside the batch of ", state.s1.dim(0));
    FATHOM_CHECK(one->state.s2.defined() == state.s2.defined(), "dsla state: the states' counts differ");
    state.s1.narrow(row, 1).copy_from(one->state.s1);
    if (state.s2.defined()) state.s2.narrow(row, 1).copy_from(one->state.s2);
    length = std::max(length, one->length);
  }
};

}  // namespace

LayerKind dsla_layer_kind() {
  return {
      .name = kDslaKind,
      .make_mixer = [](const ModelConfig& c, int64_t) -> std::unique_ptr<TokenMixer> {
        return std::make_unique<Dsla>(c);
      },
      .validate = [](const ModelConfig& c) { c.options.get<DslaConfig>().validate(); },
      .options =
          {kind_option(
               "dsla.states", &DslaConfig::states,
               {.at_least = 1,
                .at_most = 2,
                .aliases = {"num_states", "n_states", "dual_state"},
                .doc =
                    "Gated states of each dsla layer: `2` (DSLA: two states mixed by gamma) or `1` (plain gated linear "
                    "attention, no gamma)."}),
           kind_option("dsla.gamma", &DslaConfig::gamma,
                       {.choices = dsla_gamma_names(),
                        .aliases = {"mix", "mixing", "gamma_per"},
                        .doc = "The mixing weight gamma = sigmoid(c) of the two states: one c per `layer` (the paper) "
                               "or per query "
                               "`head`."})},
      .loss_terms = {{.name = kGateCosLoss}}};
}

DslaGate::DslaGate(int64_t d_model, int64_t width, ParameterInit weight_init)
    : weight_(add_parameter("weight", {width, d_model}, weight_init)),
      bias_(add_parameter("bias", {width}, ParameterInit::zeros())) {}

Variable DslaGate::forward(const Variable& x) const { return log_sigmoid_gate(linear(x, weight_), bias_, kGateScale); }

// Gate init (DESIGN.md 4.4): state 1 W = I, b = 0, so its gates follow the input from the first step;
// state 2 a small random W (the model's init std), b = 0: z near 0, retention about 0.96. With
// n_heads * head_dim != d_model the identity is rectangular (the extra gates start at z = 0).
Dsla::Dsla(const ModelConfig& c)
    : ProjectedMixer(c),
      states_(c.options.get<DslaConfig>().states),
      gate1_(c.d_model, c.n_heads * c.head_dim(), ParameterInit::identity()) {
  // QK-norm (ProjectedMixer's, with model.qk_norm) is kept from the teacher's attention: its q and k
  // are normalised, so a teacher-initialised layer reads the q and k the teacher did (and the state's
  // inputs stay bounded without a softmax).
  add_child("gate1_proj", gate1_);
  if (states_ == 2) {
    gate2_ = std::make_unique<DslaGate>(c.d_model, c.n_heads * c.head_dim(),
                                        ParameterInit::normal(c.init_std, c.init_cutoff));
    add_child("gate2_proj", *gate2_);
    const int64_t logits = c.options.get<DslaConfig>().gamma == DslaGamma::head ? c.n_heads : 1;
    gamma_logit_ = add_parameter("gamma_logit", {logits}, ParameterInit::zeros());  // gamma = 0.5
  }
}

Variable Dsla::forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const {
  FATHOM_CHECK(!inputs.depth, "a dsla layer reads no MoDA depth stream (validation refuses moda with dsla layers)");
  const int64_t B = x.dim(0), T = x.dim(1);
  std::vector<Variable> qkv = project_each(x, {&q_proj_, &k_proj_, &v_proj_});
  Variable q = std::move(qkv[0]), k = std::move(qkv[1]);
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = reshape(q, {B, T, n_heads_, head_dim_});
  k = reshape(k, {B, T, n_kv_heads_, head_dim_});
  const Variable v = reshape(qkv[2], {B, T, n_kv_heads_, head_dim_});
  const Variable g1 = reshape(gate1_.forward(x), {B, T, n_heads_, head_dim_});
  const Variable g2 = gate2_ ? reshape(gate2_->forward(x), {B, T, n_heads_, head_dim_}) : Variable();
  const Variable gamma = gate2_ ? sigmoid_expand(gamma_logit_, n_heads_) : Variable();
  if (report.wants(kGateCosLoss) && g2.defined()) {
    // One row per token and head: the two states' per-key-dimension gates, compared as vectors.
    const Shape rows{B * T * n_heads_, head_dim_};
    report.add_loss(kGateCosLoss, mean_row_cosine(reshape(g1, rows), reshape(g2, rows)));
  }
  Variable o;
  if (auto* cache = static_cast<DslaCache*>(inputs.cache)) {
    FATHOM_CHECK(!x.requires_grad(), "decoding keeps no gradient; run it under NoGrad");
    const Tensor g2_value = g2.defined() ? g2.value() : Tensor();
    const Tensor gamma_value = gamma.defined() ? gamma.value() : Tensor();
    if (cache->length == 0) {
      DslaForward prompt = dsla_forward(q.value(), k.value(), v.value(), g1.value(), g2_value, gamma_value, {}, true);
      cache->state = std::move(prompt.final_state);
      o = Variable(std::move(prompt.o));
    } else {
      o = Variable(dsla_step(q.value(), k.value(), v.value(), g1.value(), g2_value, gamma_value, cache->state));
    }
    cache->length += T;
  } else {
    o = dsla_attention(q, k, v, g1, g2, gamma);
  }
  return o_proj_.forward(reshape(o, {B, T, n_heads_ * head_dim_}));
}

LayerCost Dsla::cost(const CostQuery& query) const {
  const int64_t q = n_heads_ * head_dim_, kv = n_kv_heads_ * head_dim_, qk = q_norm_ ? 1 : 0;
  LayerCost c;
  // q, k (and their norms' inputs), v, the mixer output; and the CUDA bf16 kernels' kept intra-chunk
  // scores, a 64-wide row per token, head and state (DslaForward::scores).
  c.saved_elements = (1 + qk) * q + (1 + qk) * kv + kv + q + states_ * n_heads_ * kDslaChunk;
  c.saved_stats = 2 * qk + states_ * q;
  // Per head and state, forward: causal intra-chunk scores and values (C d each, C = 64 or the
  // sequence if shorter) and the inter-chunk state read and update (2 d^2 each); backward twice that.
  const double d = double(head_dim_), chunk = double(std::min(kDslaChunk, query.seq_len));
  c.extra_flops = 3.0 * double(states_ * n_heads_) * (2.0 * chunk * d + 4.0 * d * d);
  return c;
}

std::unique_ptr<MixerCache> Dsla::make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const {
  auto cache = std::make_unique<DslaCache>();
  const Shape state{batch, n_heads_, head_dim_, head_dim_};
  cache->state.s1 = Tensor::zeros(state, DType::f32, device);
  if (states_ == 2) cache->state.s2 = Tensor::zeros(state, DType::f32, device);
  return cache;
}

}  // namespace fathom
