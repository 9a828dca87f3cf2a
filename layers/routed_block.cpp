#include "layers/routed_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/philox.h"

namespace fathom {

namespace {

ParameterInit linear_init(const ModelConfig& c) { return ParameterInit::normal(c.init_std, c.init_cutoff); }

// One block cache per sequence: their lengths differ, since each holds only its routed tokens.
struct RoutedCache final : MixerCache {
  std::vector<std::unique_ptr<MixerCache>> sequences;
  size_t bytes() const override {
    size_t total = 0;
    for (const auto& s : sequences) total += s->bytes();
    return total;
  }
  size_t bytes_per_position() const override {
    size_t total = 0;
    for (const auto& s : sequences) total += s->bytes_per_position();
    return total;
  }
  int64_t length() const override {  // routed positions, over the batch
    int64_t total = 0;
    for (const auto& s : sequences) total += s->length();
    return total;
  }
};

// F32 [B, S]: 1 where idx chose the token, else 0.
Tensor topk_membership(const Tensor& idx, int64_t seq_len) {
  return scatter_rows(Tensor::full(idx.shape(), 1.0, DType::f32, idx.device()), idx, seq_len);
}

// Philox stream of the random router of `layer` (the high bit keeps it apart from the init streams).
uint64_t random_router_seed(int64_t layer, uint64_t salt) {
  return (uint64_t(1) << 63) ^ (uint64_t(layer) << 40) ^ salt;
}

float unit_draw(uint64_t seed, uint64_t index) { return philox::to_unit(philox::draw(seed, index, 0).v[0]); }

}  // namespace

RoutingCounts& RoutingCounts::operator+=(const RoutingCounts& o) {
  tokens += o.tokens;
  topk += o.topk;
  causal += o.causal;
  causal_and_topk += o.causal_and_topk;
  router += o.router;
  router_and_topk += o.router_and_topk;
  return *this;
}

double RoutingCounts::accuracy() const {
  return tokens ? double(tokens - topk - causal + 2 * causal_and_topk) / double(tokens) : 0.0;
}
double RoutingCounts::precision() const { return causal ? double(causal_and_topk) / double(causal) : 0.0; }
double RoutingCounts::recall() const { return topk ? double(causal_and_topk) / double(topk) : 0.0; }
double RoutingCounts::router_agreement() const {
  return tokens ? double(tokens - topk - router + 2 * router_and_topk) / double(tokens) : 0.0;
}
double RoutingCounts::causal_fraction() const { return tokens ? double(causal) / double(tokens) : 0.0; }
double RoutingCounts::topk_fraction() const { return tokens ? double(topk) / double(tokens) : 0.0; }

RoutedBlock::RoutedBlock(const ModelConfig& c, int64_t layer)
    : mod_(c.mod), layer_(layer), d_model_(c.d_model), block_(c, layer) {
  add_child("", block_);  // the block keeps its own names: a dense checkpoint's layer loads into it
  if (mod_.router == ModRouter::learned) {
    router_ = std::make_unique<Linear>(c.d_model, 1, linear_init(c));
    add_child("mod.router", *router_);
  }
  if (mod_.has_predictor()) {
    const int64_t hidden = std::max<int64_t>(1, c.d_model / 8);
    predictor_fc1_ = std::make_unique<Linear>(c.d_model, hidden, linear_init(c));
    predictor_fc2_ = std::make_unique<Linear>(hidden, 1, linear_init(c));
    add_child("mod.predictor.fc1", *predictor_fc1_);
    add_child("mod.predictor.fc2", *predictor_fc2_);
  }
}

RouteWeight RoutedBlock::route_weight() const {
  if (!router_) return RouteWeight::one;
  return mod_.router_weight == ModRouterWeight::sigmoid ? RouteWeight::sigmoid : RouteWeight::identity;
}

Variable RoutedBlock::router_logits(const Variable& x) const {
  if (!router_) return Variable();
  return reshape(linear_wide(x, router_->weight()), {x.dim(0), x.dim(1)});
}

Tensor RoutedBlock::random_scores(int64_t batch, int64_t seq_len, uint64_t forward_index, Device device) const {
  const uint64_t seed = random_router_seed(layer_, forward_index);
  std::vector<float> scores(size_t(batch * seq_len));
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = unit_draw(seed, i);
  return Tensor::from_vector(scores, {batch, seq_len}).to(device);
}

Tensor RoutedBlock::causal_logits(const Variable& x, const Variable& r, const Tensor& positions) const {
  const int64_t B = x.dim(0), T = x.dim(1);
  if (predictor_fc1_) {
    NoGrad no_grad;
    const Variable h = silu(predictor_fc1_->forward(x.detach()));
    return reshape(linear_wide(h, predictor_fc2_->weight()), {B, T}).value();
  }
  if (router_) return r.value();
  // Random routing has no causal router: each token goes through with probability c, drawn per
  // sequence and absolute position so decoding step by step draws what a whole forward does.
  const std::vector<int32_t> pos = positions.to(Device::cpu()).to_vector<int32_t>();
  const bool shared = positions.rank() == 1;
  std::vector<float> logits(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = pos[size_t(shared ? t : b * T + t)];
      logits[size_t(b * T + t)] = float(mod_.capacity) - unit_draw(random_router_seed(layer_, uint64_t(b) << 20), uint64_t(p));
    }
  return Tensor::from_vector(logits, {B, T}).to(x.device());
}

Variable RoutedBlock::run_block(const Variable& x, const Tensor& positions, const MixerContext& context,
                                MixerCache* cache) const {
  if (recompute_block_ && !cache && GradMode::enabled() && x.requires_grad())
    return checkpoint([this, positions](const Variable& v) { return block_.forward(v, MixerContext{positions}); }, x,
                      block_.parameter_variables());
  MixerContext inner{positions};
  inner.attention_entropy = context.attention_entropy;
  inner.cache = cache;
  return block_.forward(x, inner);
}

Variable RoutedBlock::forward(const Variable& x, const MixerContext& context) const {
  FATHOM_CHECK(x.shape().rank() == 3, "routed block: x must be [B, S, d], got ", describe(x.value()));
  FATHOM_CHECK(!context.depth, "routed block: MoD takes no MoDA depth stream");
  const int64_t B = x.dim(0), S = x.dim(1);
  const Variable r = router_logits(x);
  if (context.cache || context.causal_routing) return forward_causal(x, r, context);
  // Ranked in f32 (the value itself when it is f32: the router's logits are).
  const Tensor idx = topk_per_sequence(r.defined() ? r.value().to(DType::f32) : random_scores(B, S, context.forward_index, x.device()),
                                       mod_.tokens_routed(S));
  // The chosen tokens keep their original positions: idx is their RoPE position.
  const Variable y = run_block(gather_rows(x, idx), idx, context, nullptr);
  const Variable out = routed_mix(x, y, r, idx, route_weight());
  if (context.aux_losses || context.routing_counts) {
    const Tensor targets = topk_membership(idx, S);
    if (context.aux_losses && mod_.has_aux_loss()) context.aux_losses->push_back({"mod_router", routing_bce(r, targets)});
    if (context.aux_losses && mod_.has_predictor()) {
      // On the stop-gradient input: the predictor learns from the routing, never changes it.
      const Variable h = silu(predictor_fc1_->forward(x.detach()));
      const Variable p = reshape(linear_wide(h, predictor_fc2_->weight()), {B, S});
      context.aux_losses->push_back({"mod_predictor", routing_bce(p, targets)});
    }
    if (context.routing_counts) count(x, r, targets, context);
  }
  return out;
}

void RoutedBlock::count(const Variable& x, const Variable& r, const Tensor& topk_targets,
                        const MixerContext& context) const {
  NoGrad no_grad;
  const std::vector<float> chosen = topk_targets.to(Device::cpu()).to_vector<float>();
  const std::vector<float> causal =
      causal_logits(x, r, context.positions).to(Device::cpu()).to_vector<float>();
  const std::vector<float> router = r.defined() ? r.value().to(Device::cpu()).to_vector<float>() : std::vector<float>();
  RoutingCounts& counts = *context.routing_counts;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const bool topk = chosen[i] > 0.5f, routed = causal[i] > 0.0f;
    counts.tokens += 1;
    counts.topk += topk;
    counts.causal += routed;
    counts.causal_and_topk += routed && topk;
    if (!router.empty()) {
      counts.router += router[i] > 0.0f;
      counts.router_and_topk += router[i] > 0.0f && topk;
    }
  }
}

Variable RoutedBlock::forward_causal(const Variable& x, const Variable& r, const MixerContext& context) const {
  FATHOM_CHECK(!GradMode::enabled() || !x.requires_grad(),
               "routed block: causal routing is for evaluation and generation; run it under NoGrad");
  const int64_t B = x.dim(0), T = x.dim(1);
  RoutedCache* cache = static_cast<RoutedCache*>(context.cache);
  FATHOM_CHECK(!cache || int64_t(cache->sequences.size()) == B, "routed block: the cache holds ",
               cache ? cache->sequences.size() : 0, " sequences, the input ", B);
  // Each sequence routes its own tokens, so each runs the block on its own rows.
  const Tensor decide = causal_logits(x, r, context.positions);
  const std::vector<float> logits = decide.to(Device::cpu()).to_vector<float>();
  const std::vector<int32_t> pos = context.positions.to(Device::cpu()).to_vector<int32_t>();
  const bool shared_positions = context.positions.rank() == 1;
  Tensor out = x.value().clone();
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> rows, positions;
    for (int64_t t = 0; t < T; ++t)
      if (logits[size_t(b * T + t)] > 0.0f) {
        rows.push_back(int32_t(t));
        positions.push_back(pos[size_t(shared_positions ? t : b * T + t)]);
      }
    if (rows.empty()) continue;  // nothing runs the block, nothing enters its cache
    const int64_t n = int64_t(rows.size());
    const Tensor idx = Tensor::from_vector(rows, {1, n}).to(x.device());
    const Tensor xb = x.value().narrow(b, 1);
    const Variable y = run_block(Variable(gather_rows(xb, idx)), Tensor::from_vector(positions, {1, n}).to(x.device()),
                                 context, cache ? cache->sequences[size_t(b)].get() : nullptr);
    Tensor row_out = out.narrow(b, 1);
    row_out.copy_from(routed_mix_forward(xb, y.value(), r.defined() ? r.value().narrow(b, 1) : Tensor(), idx,
                                         route_weight()));
  }
  if (context.routing_counts && !cache) {
    const int64_t k = mod_.tokens_routed(T);
    const Tensor scores = r.defined() ? r.value().to(DType::f32) : random_scores(B, T, context.forward_index, x.device());
    count(x, r, topk_membership(topk_per_sequence(scores, k), T), context);
  }
  return Variable(out);
}

LayerCost RoutedBlock::cost(const CostQuery& query) const {
  const int64_t S = query.seq_len, k = mod_.tokens_routed(S);
  const double share = double(k) / double(S);
  const auto scaled = [share](int64_t v) { return int64_t(std::ceil(double(v) * share)); };
  const LayerCost inner = block_.cost(CostQuery{k, query.depth_slots_before});
  const int64_t hidden = predictor_fc1_ ? predictor_fc1_->weight().dim(0) : 0;
  LayerCost c;
  // The chosen rows' tensors and the block's output on them; the whole input x (the router's and the
  // residual's), the predictor's two hidden activations; fp32 logits and top-k targets.
  c.saved_elements = scaled(inner.saved_elements + d_model_) + d_model_ + 2 * hidden;
  c.rebuilt_elements = scaled(inner.rebuilt_elements);
  c.saved_stats = scaled(inner.saved_stats) + (router_ ? 2 : 0) + (predictor_fc1_ ? 1 : 0);
  c.weight_flops = inner.weight_flops * share;
  c.extra_flops = inner.extra_flops * share;
  for (const Module* head : {static_cast<const Module*>(router_.get()), static_cast<const Module*>(predictor_fc1_.get()),
                             static_cast<const Module*>(predictor_fc2_.get())})
    if (head)
      for (const Parameter& p : head->parameters()) c.weight_flops += 6.0 * double(p.var.shape().numel());
  return c;
}

std::unique_ptr<MixerCache> RoutedBlock::make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const {
  auto cache = std::make_unique<RoutedCache>();
  for (int64_t b = 0; b < batch; ++b) cache->sequences.push_back(block_.make_cache(1, capacity, dtype, device));
  return cache;
}

}  // namespace fathom
