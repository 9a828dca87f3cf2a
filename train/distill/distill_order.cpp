#include "train/distill/distill_order.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/file_io.h"
#include "data/loader.h"
#include "layers/attention.h"
#include "layers/dsla.h"
#include "layers/parameter_arena.h"
#include "train/distill/distill_init.h"
#include "train/measure/evaluator.h"

namespace fathom {

namespace {

const char* order_name(DistillOrder order) {
  switch (order) {
    case DistillOrder::entropy:
      return "entropy";
    case DistillOrder::sensitivity:
      return "sensitivity";
    case DistillOrder::list:
      return "list";
  }
  return "?";
}

bool converts_attention(const ModelConfig& config, int64_t layer) { return config.layer_kind(layer) == kAttentionKind; }

// Lowest score first; ties to the lower index.
void sort_ranks(std::vector<LayerRank>& ranks) {
  std::stable_sort(ranks.begin(), ranks.end(), [](const LayerRank& a, const LayerRank& b) {
    return a.score != b.score ? a.score < b.score : a.layer < b.layer;
  });
}

std::vector<LayerRank> by_entropy(const Recipe& recipe, const Teacher& teacher, const RunData& data) {
  const ModelConfig& config = teacher.decoder().config();
  TokenLoader calibration(data.train, recipe.train.batch_size, recipe.train.seq_len, recipe.train.seed);
  std::vector<double> sums(size_t(config.n_layers), 0.0);
  for (int64_t b = 0; b < recipe.distill.calibration_batches; ++b) {
    const std::vector<std::optional<double>> entropy = teacher.attention_entropy(calibration.next_batch().inputs);
    for (int64_t i = 0; i < config.n_layers; ++i)
      if (entropy[size_t(i)]) sums[size_t(i)] += *entropy[size_t(i)];
  }
  std::vector<LayerRank> ranks;
  for (int64_t i = 0; i < config.n_layers; ++i)
    if (converts_attention(config, i))
      ranks.push_back({i, sums[size_t(i)] / double(recipe.distill.calibration_batches)});
  return ranks;
}

// Mean validation loss over the domains with only `layer` a teacher-initialised dsla layer.
double loss_with_layer_converted(const Recipe& recipe, const Teacher& teacher, const RunData& data, int64_t layer) {
  ModelConfig config = teacher.decoder().config();
  std::vector<std::string> kinds;
  for (int64_t i = 0; i < config.n_layers; ++i) kinds.push_back(config.layer_kind(i));
  kinds[size_t(layer)] = kDslaKind;
  config.layers = kinds;
  config.options.get<DslaConfig>() = recipe.model.options.get<DslaConfig>();
  Decoder model(config);
  ParameterArena arena(model, teacher.device());
  arena.initialise(recipe.train.seed);
  TensorMap weights;
  for (const auto& [name, value] : arena.named_values()) weights.emplace_back(name, value.clone());
  overlay_weights(weights, teacher.files().weights, "distill.teacher");
  arena.load(weights, "distill.teacher");
  double total = 0;
  for (const auto& [domain, source] : data.validation)
    total +=
        evaluate(model, source, recipe.train.batch_size, recipe.train.seq_len, recipe.eval.batches, teacher.device())
            .loss;
  return total / double(data.validation.size());
}

std::string format_score(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6f", v);
  return text;
}

}  // namespace

DistillRanking rank_layers(const Recipe& recipe, const DistillPlan& plan, const Teacher& teacher, const RunData& data) {
  const ModelConfig& config = teacher.decoder().config();
  DistillRanking ranking;
  ranking.order = plan.order;
  switch (plan.order) {
    case DistillOrder::entropy:
      ranking.ranked = by_entropy(recipe, teacher, data);
      sort_ranks(ranking.ranked);
      break;
    case DistillOrder::sensitivity:
      for (int64_t i = 0; i < config.n_layers; ++i)
        if (converts_attention(config, i))
          ranking.ranked.push_back({i, loss_with_layer_converted(recipe, teacher, data, i)});
      sort_ranks(ranking.ranked);
      break;
    case DistillOrder::list:
      for (int64_t layer : plan.listed) {
        FATHOM_CHECK(converts_attention(config, layer), "distill.order: layer ", layer, " of the teacher is ",
                     config.layer_kind(layer), ", not attention; only attention layers convert");
        ranking.ranked.push_back({layer, 0});
      }
      break;
  }
  FATHOM_CHECK(int64_t(ranking.ranked.size()) >= plan.count, "distill.layers: ", plan.count,
               " layers to convert, but the teacher has only ", ranking.ranked.size(), " attention layers");
  return ranking;
}

void write_ranking(const DistillRanking& ranking, const std::filesystem::path& folder) {
  const bool scored = ranking.order != DistillOrder::list;
  const std::string score = ranking.order == DistillOrder::entropy ? "mean attention entropy (nats)"
                                                                   : "validation loss, this layer converted";
  std::string md = "# Layer order: " + std::string(order_name(ranking.order)) + "\n\n| rank | layer |" +
                   (scored ? " " + score + " |" : "") + "\n|---|---|" + (scored ? "---|" : "") + "\n";
  std::string json = "{\"order\": \"" + std::string(order_name(ranking.order)) + "\", \"layers\": [";
  for (size_t r = 0; r < ranking.ranked.size(); ++r) {
    const LayerRank& rank = ranking.ranked[r];
    md += "| " + std::to_string(r + 1) + " | " + std::to_string(rank.layer) + " |" +
          (scored ? " " + format_score(rank.score) + " |" : "") + "\n";
    json += std::string(r ? ", " : "") + "{\"rank\": " + std::to_string(r + 1) +
            ", \"layer\": " + std::to_string(rank.layer) + (scored ? ", \"score\": " + format_score(rank.score) : "") +
            "}";
  }
  json += "]}\n";
  write_file_atomically(folder / "order.md", md);
  write_file_atomically(folder / "order.json", json);
}

}  // namespace fathom
