// A layer kind defined outside the library, as a plug-in would be: "mean", a token mixer that averages
// the value projections of every position up to the current one (softmax attention with all-zero
// queries), o_proj(mean_{s<=t} v_proj(x_s)) * mean.scale. It registers an option (mean.scale), a loss
// term (mean_gate: a BCE that trains a per-token gate towards 1, read by nothing else), a tap and an
// evaluation metric (mean.L<i>.mean_abs: the mean |output|), and its decoding state (running sums).
#pragma once

#include "layers/layer_kinds.h"

namespace fathom::test {

struct MeanOptions {
  double scale = 1.0;
  bool operator==(const MeanOptions&) const = default;
};

inline constexpr char kMeanKind[] = "mean";
inline constexpr char kMeanGateLoss[] = "mean_gate";
inline constexpr char kMeanOutputTap[] = "mean.output";

LayerKind mean_layer_kind();

}  // namespace fathom::test
