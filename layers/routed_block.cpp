#include "layers/routed_block.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/philox.h"
#include "layers/layer_kinds.h"
#include "layers/moda_config.h"

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
  void copy_sequence(int64_t row, const MixerCache& single) override {
    const auto* one = dynamic_cast<const RoutedCache*>(&single);
    FATHOM_CHECK(one && one->sequences.size() == 1, "routed block: a sequence is taken from a one-sequence cache");
    FATHOM_CHECK(row >= 0 && row < int64_t(sequences.size()), "routed block: row ", row, " outside the batch of ",
                 sequences.size());
    sequences[size_t(row)]->copy_sequence(0, *one->sequences[0]);
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

// The figures of a routed layer's evaluation, from its summed counts.
std::vector<std::pair<std::string, double>> routing_metrics(const LayerMeasures& measures) {
  const RoutingCounts c = RoutingCounts::from(measures);
  return {{"accuracy", c.accuracy()},
          {"precision", c.precision()},
          {"recall", c.recall()},
          {"router_agreement", c.router_agreement()},
          {"routed_fraction", c.causal_fraction()},
          {"topk_fraction", c.topk_fraction()}};
}

std::string routing_line(int64_t layer, const LayerMeasures& measures) {
  const RoutingCounts c = RoutingCounts::from(measures);
  char line[256];
  std::snprintf(line, sizeof line,
                "  mod L%lld | causal routes %.1f%% (top-k %.1f%%) | accuracy %.4f | precision %.4f | recall %.4f | "
                "router agreement %.4f",
                (long long)layer, 100 * c.causal_fraction(), 100 * c.topk_fraction(), c.accuracy(), c.precision(),
                c.recall(), c.router_agreement());
  return line;
}

}  // namespace

LayerKind mod_layer_kind() {
  const auto weight = [](bool reported, double value) {
    return reported ? std::optional<double>(value) : std::nullopt;
  };
  return {
      .name = "mod",
      .make_layer = [](const ModelConfig& c, int64_t layer) -> std::unique_ptr<DecoderLayer> {
        if (!c.options.get<ModConfig>().routes(layer)) return nullptr;
        return std::make_unique<RoutedBlock>(c, layer);
      },
      .validate =
          [](const ModelConfig& c) {
            const ModConfig& mod = c.options.get<ModConfig>();
            const MoDAConfig& moda = c.options.get<MoDAConfig>();
            mod.validate(c.n_layers);
            // A token that skips a routed block would write no depth slot there, so the readers after it
            // would see a stream with holes in some token positions: an operator fathom does not define.
            FATHOM_CHECK(!(mod.enabled() && moda.enabled()), "mod.capacity ", mod.capacity, " with moda.variant '",
                         name_of(moda.variant),
                         "': MoD and MoDA cannot be combined (a token that skips a routed block writes no depth "
                         "slot there, which MoDA's depth stream does not define); turn one of them off");
          },
      .options =
          {kind_option("mod.capacity", &ModConfig::capacity,
                       {.at_least = 0,
                        .at_most = 1,
                        .aliases = {"capacity_factor", "capacity_fraction", "mod_capacity"},
                        .doc = "Mixture-of-Depths: the fraction c of each sequence's tokens a routed block runs (k = "
                               "ceil(c S)); 0 "
                               "turns MoD off. Not combinable with `moda.variant`."}),
           kind_option(
               "mod.every", &ModConfig::every,
               {.at_least = 1,
                .aliases = {"route_every", "routed_every", "interleave"},
                .doc = "Route blocks every-1, 2·every-1, ... (block 0 always stays dense; `2`: every other block)."}),
           kind_option("mod.router_weight", &ModConfig::router_weight,
                       {.choices = mod_router_weight_names(),
                        .aliases = {"gate", "weight", "router_activation"},
                        .doc = "g in `out[idx] = x + g(r)·(block(x) - x)`: `identity` (the paper) or `sigmoid`."}),
           kind_option(
               "mod.causal", &ModConfig::causal,
               {.choices = mod_causal_names(),
                .aliases = {"causal_routing", "sampling"},
                .doc = "How generation routes, token by token: `predictor` (a small MLP on the stop-gradient input) or "
                       "`aux_loss` (the router trained with BCE; route where sigmoid(r) > 0.5)."}),
           kind_option("mod.aux_loss_weight", &ModConfig::aux_loss_weight,
                       {.at_least = 0,
                        .aliases = {"aux_loss", "router_loss_weight", "aux_weight"},
                        .doc = "Objective weight of the router's BCE (`mod_router`, with `causal: aux_loss`)."}),
           kind_option("mod.predictor_loss_weight", &ModConfig::predictor_loss_weight,
                       {.at_least = 0,
                        .aliases = {"predictor_loss", "predictor_weight"},
                        .doc = "Objective weight of the predictor's BCE (`mod_predictor`, with `causal: predictor`)."}),
           kind_option("mod.router", &ModConfig::router,
                       {.choices = mod_router_names(),
                        .aliases = {"routing", "router_type"},
                        .doc = "`learned`, or `random`: uniform draws pick the k tokens (the paper's control at the "
                               "same capacity)."})},
      .loss_terms = {{.name = kModRouterLoss,
                      .weight_from_model =
                          [weight](const ModelConfig& c) {
                            return weight(c.options.get<ModConfig>().has_aux_loss(),
                                          c.options.get<ModConfig>().aux_loss_weight);
                          },
                      .weight_key = "mod.aux_loss_weight"},
                     {.name = kModPredictorLoss,
                      .weight_from_model =
                          [weight](const ModelConfig& c) {
                            return weight(c.options.get<ModConfig>().has_predictor(),
                                          c.options.get<ModConfig>().predictor_loss_weight);
                          },
                      .weight_key = "mod.predictor_loss_weight"}},
      .taps = {kRoutingTap},
      .metrics = {{.tap = kRoutingTap,
                   .measures = RoutingCounts::measure_names(),
                   .reported_by = [](const ModelConfig& c,
                                     int64_t layer) { return c.options.get<ModConfig>().routes(layer); },
                   .metrics = routing_metrics,
                   .console_line = routing_line}}};
}

RoutingCounts& RoutingCounts::operator+=(const RoutingCounts& o) {
  tokens += o.tokens;
  topk += o.topk;
  causal += o.causal;
  causal_and_topk += o.causal_and_topk;
  router += o.router;
  router_and_topk += o.router_and_topk;
  return *this;
}

const std::vector<std::string>& RoutingCounts::measure_names() {
  static const std::vector<std::string> names{"mod.tokens",          "mod.topk",   "mod.causal",
                                              "mod.causal_and_topk", "mod.router", "mod.router_and_topk"};
  return names;
}

void RoutingCounts::count_into(const LayerReport& report) const {
  const int64_t fields[] = {tokens, topk, causal, causal_and_topk, router, router_and_topk};
  for (size_t i = 0; i < measure_names().size(); ++i) report.count(measure_names()[i], double(fields[i]));
}

RoutingCounts RoutingCounts::from(const LayerMeasures& measures) {
  int64_t fields[6] = {};
  for (size_t i = 0; i < measure_names().size(); ++i) {
    const auto it = measures.find(measure_names()[i]);
    if (it != measures.end()) fields[i] = int64_t(it->second);
  }
  return {fields[0], fields[1], fields[2], fields[3], fields[4], fields[5]};
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
    : mod_(c.options.get<ModConfig>()), layer_(layer), d_model_(c.d_model), block_(c, layer) {
  add_child("", block_);  // the block keeps its own names: a dense checkpoint's layer loads into it
  if (mod_.router == ModRouter::learned) {
    router_ = std::make_unique<Linear>(c.d_model, 1, linear_init(c));
    router_->keep_out_of_fp8();  // tiny, and its ranking must not see FP8 ties
    add_child("mod.router", *router_);
  }
  if (mod_.has_predictor()) {
    const int64_t hidden = std::max<int64_t>(1, c.d_model / 8);
    predictor_fc1_ = std::make_unique<Linear>(c.d_model, hidden, linear_init(c));
    predictor_fc2_ = std::make_unique<Linear>(hidden, 1, linear_init(c));
    predictor_fc1_->keep_out_of_fp8();  // the causal router: small, and decides what runs
    predictor_fc2_->keep_out_of_fp8();
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
      logits[size_t(b * T + t)] =
          float(mod_.capacity) - unit_draw(random_router_seed(layer_, uint64_t(b) << 20), uint64_t(p));
    }
  return Tensor::from_vector(logits, {B, T}).to(x.device());
}

Variable RoutedBlock::run_block(const Variable& x, const Tensor& positions, const LayerReport& report,
                                MixerCache* cache) const {
  if (recompute_block_ && !cache && GradMode::enabled() && x.requires_grad())
    return checkpoint(
        [this, positions](const Variable& v) { return block_.forward(v, MixerInputs{positions}, LayerReport()); }, x,
        block_.parameter_variables());
  MixerInputs inner{positions};
  inner.cache = cache;
  return block_.forward(x, inner, report);
}

Variable RoutedBlock::forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const {
  FATHOM_CHECK(x.shape().rank() == 3, "routed block: x must be [B, S, d], got ", describe(x.value()));
  FATHOM_CHECK(!inputs.depth, "routed block: MoD takes no MoDA depth stream");
  const int64_t B = x.dim(0), S = x.dim(1);
  const Variable r = router_logits(x);
  if (inputs.cache || inputs.as_decoded) return forward_causal(x, r, inputs, report);
  // Ranked in f32 (the value itself when it is f32: the router's logits are).
  const Tensor idx = topk_per_sequence(
      r.defined() ? r.value().to(DType::f32) : random_scores(B, S, inputs.draw, x.device()), mod_.tokens_routed(S));
  // The chosen tokens keep their original positions: idx is their RoPE position.
  const Variable y = run_block(gather_rows(x, idx), idx, report, nullptr);
  const Variable out = routed_mix(x, y, r, idx, route_weight());
  const bool counting = report.wants(kRoutingTap);
  if (report.keeps_losses() || counting) {
    const Tensor targets = topk_membership(idx, S);
    if (report.keeps_losses() && mod_.has_aux_loss()) report.add_loss(kModRouterLoss, routing_bce(r, targets));
    if (report.keeps_losses() && mod_.has_predictor()) {
      // On the stop-gradient input: the predictor learns from the routing, never changes it.
      const Variable h = silu(predictor_fc1_->forward(x.detach()));
      const Variable p = reshape(linear_wide(h, predictor_fc2_->weight()), {B, S});
      report.add_loss(kModPredictorLoss, routing_bce(p, targets));
    }
    if (counting) count(x, r, targets, inputs.positions, report);
  }
  return out;
}

void RoutedBlock::count(const Variable& x, const Variable& r, const Tensor& topk_targets, const Tensor& positions,
                        const LayerReport& report) const {
  NoGrad no_grad;
  const std::vector<float> chosen = topk_targets.to(Device::cpu()).to_vector<float>();
  const std::vector<float> causal = causal_logits(x, r, positions).to(Device::cpu()).to_vector<float>();
  const std::vector<float> router = r.defined() ? r.value().to(Device::cpu()).to_vector<float>() : std::vector<float>();
  RoutingCounts counts;
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
  counts.count_into(report);
}

Variable RoutedBlock::forward_causal(const Variable& x, const Variable& r, const MixerInputs& inputs,
                                     const LayerReport& report) const {
  FATHOM_CHECK(!GradMode::enabled() || !x.requires_grad(),
               "routed block: causal routing is for evaluation and generation; run it under NoGrad");
  const int64_t B = x.dim(0), T = x.dim(1);
  RoutedCache* cache = static_cast<RoutedCache*>(inputs.cache);
  FATHOM_CHECK(!cache || int64_t(cache->sequences.size()) == B, "routed block: the cache holds ",
               cache ? cache->sequences.size() : 0, " sequences, the input ", B);
  // Each sequence routes its own tokens, so each runs the block on its own rows.
  const Tensor decide = causal_logits(x, r, inputs.positions);
  const std::vector<float> logits = decide.to(Device::cpu()).to_vector<float>();
  const std::vector<int32_t> pos = inputs.positions.to(Device::cpu()).to_vector<int32_t>();
  const bool shared_positions = inputs.positions.rank() == 1;
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
                                 report, cache ? cache->sequences[size_t(b)].get() : nullptr);
    Tensor row_out = out.narrow(b, 1);
    row_out.copy_from(
        routed_mix_forward(xb, y.value(), r.defined() ? r.value().narrow(b, 1) : Tensor(), idx, route_weight()));
  }
  if (report.wants(kRoutingTap) && !cache) {
    const int64_t k = mod_.tokens_routed(T);
    const Tensor scores = r.defined() ? r.value().to(DType::f32) : random_scores(B, T, inputs.draw, x.device());
    count(x, r, topk_membership(topk_per_sequence(scores, k), T), inputs.positions, report);
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
  for (const Module* head :
       {static_cast<const Module*>(router_.get()), static_cast<const Module*>(predictor_fc1_.get()),
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
