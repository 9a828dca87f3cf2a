// A Mixture-of-Depths routed block (DESIGN.md 4.3): it wraps a Block. A router (Linear d -> 1, fp32
// logits r) picks exactly k = ceil(c S) tokens of each sequence (top-k over the sequence, ties to the
// lower index, indices ascending); only they run the block, at their ORIGINAL positions (RoPE) and
// attending causally among themselves; the others pass unchanged:
//   out = x;  out[b, idx] += g(r[b, idx]) * (block(x[b, idx]) - x[b, idx])     g = identity | sigmoid
// so the router's gradient comes only through g(r) * delta. For generation a causal router decides per
// token: a predictor (Linear d -> d/8, SiLU, Linear -> 1) on the stop-gradient input trained with BCE
// against top-k membership (loss mod_predictor), or the router itself trained with that BCE (loss
// mod_router), routing where sigmoid(r) > 0.5. With mod.router: random, uniform draws pick the k tokens
// and their delta has weight 1 (no router). Parameters: the block's under its own names, the router
// under mod.router, the predictor under mod.predictor.fc1 / fc2.
#pragma once
#include <memory>

#include "kernels/mod/mod_routing.h"

#include "layers/block.h"
#include "layers/linear.h"
#include "layers/mod_config.h"

namespace fathom {

// MoD's loss terms (weighted by mod.aux_loss_weight and mod.predictor_loss_weight), and its tap: a
// routed block asked for it counts how its causal router agreed with top-k (RoutingCounts).
inline constexpr char kModRouterLoss[] = "mod_router";
inline constexpr char kModPredictorLoss[] = "mod_predictor";
inline constexpr char kRoutingTap[] = "mod.routing";

struct LayerKind;
// MoD's registration (layers/layer_kinds.h): its loss terms and its evaluation metrics.
LayerKind mod_layer_kind();

// How a routed block's causal router (the predictor, or the router's threshold) agreed with top-k
// over the tokens it saw: the counts behind accuracy, precision and recall of the chosen tokens.
struct RoutingCounts {
  int64_t tokens = 0;
  int64_t topk = 0;    // chosen by the sequence's top-k
  int64_t causal = 0;  // routed by the causal router
  int64_t causal_and_topk = 0;
  int64_t router = 0;  // where the router's logit is > 0 (sigmoid(r) > 0.5)
  int64_t router_and_topk = 0;

  RoutingCounts& operator+=(const RoutingCounts& other);
  // As a layer's measures ("mod.tokens", ...: counts that add over batches and ranks), and back; the
  // measures of a layer that counted none give all zeros.
  void count_into(const LayerReport& report) const;
  static RoutingCounts from(const LayerMeasures& measures);
  static const std::vector<std::string>& measure_names();
  double accuracy() const;          // causal router vs top-k, over all tokens
  double precision() const;         // of the causally routed tokens, the top-k share (0 when none routed)
  double recall() const;            // of the top-k tokens, the causally routed share
  double router_agreement() const;  // sigmoid(r) > 0.5 vs top-k, over all tokens
  double causal_fraction() const;   // tokens the causal router routes
  double topk_fraction() const;     // k / S
};

class RoutedBlock : public DecoderLayer {
 public:
  RoutedBlock(const ModelConfig& config, int64_t layer);
  // Top-k routing, or with inputs.as_decoded (and always when decoding) the causal router's. Asked
  // for kRoutingTap, it counts the agreement (RoutingCounts) into its report.
  Variable forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const override;
  // The block's costs for its k tokens (per token of the sequence: scaled by k / S), plus the router's
  // and the predictor's.
  LayerCost cost(const CostQuery& query) const override;
  int64_t depth_slots_written() const override { return 0; }  // MoD excludes MoDA (ModelConfig::validate)
  // One block cache per sequence: each holds only the tokens routed through this block.
  std::unique_ptr<MixerCache> make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const override;
  // Its losses are reported from its forward, so train.recompute: block re-runs only the inner block.
  bool rerunnable() const override { return false; }
  void set_recompute(bool block) override { recompute_block_ = block; }

  const Block& block() const { return block_; }

 private:
  // Router logits F32 [B, S] (undefined for random routing).
  Variable router_logits(const Variable& x) const;
  // The causal router's logits F32 [B, S]: route where > 0.
  Tensor causal_logits(const Variable& x, const Variable& r, const Tensor& positions) const;
  Tensor random_scores(int64_t batch, int64_t seq_len, uint64_t forward_index, Device device) const;
  Variable run_block(const Variable& x, const Tensor& positions, const LayerReport& report, MixerCache* cache) const;
  Variable forward_causal(const Variable& x, const Variable& r, const MixerInputs& inputs,
                          const LayerReport& report) const;
  void count(const Variable& x, const Variable& r, const Tensor& topk_targets, const Tensor& positions,
             const LayerReport& report) const;
  RouteWeight route_weight() const;

  ModConfig mod_;
  int64_t layer_, d_model_;
  Block block_;
  std::unique_ptr<Linear> router_;                         // learned routing
  std::unique_ptr<Linear> predictor_fc1_, predictor_fc2_;  // causal: predictor
  bool recompute_block_ = false;
};

}  // namespace fathom
