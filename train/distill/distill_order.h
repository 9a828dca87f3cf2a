// Which teacher layers a distillation converts, first converted first (DESIGN.md 4.4):
// lowest mean attention entropy on a calibration batch, smallest validation loss with that one layer
// replaced by a teacher-initialised dsla layer, or the recipe's list. Ties go to the lower index, so
// the order is deterministic. The ranking's per-layer table goes to order.md and order.json.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "train/distill/distill_config.h"
#include "train/distill/distill_teacher.h"
#include "train/run/run_data.h"

namespace fathom {

struct LayerRank {
  int64_t layer = 0;
  double score = 0;  // entropy (nats) or validation loss; unused for a list
};

struct DistillRanking {
  DistillOrder order = DistillOrder::entropy;
  std::vector<LayerRank> ranked;  // the attention layers, first converted first
};

DistillRanking rank_layers(const Recipe& recipe, const DistillPlan& plan, const Teacher& teacher, const RunData& data);

// order.md and order.json in `folder`.
void write_ranking(const DistillRanking& ranking, const std::filesystem::path& folder);

}  // namespace fathom
