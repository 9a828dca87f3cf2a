// What a recipe's `distill` section asks for (DESIGN.md 4.4), checked against the teacher's depth:
// how the layers are ranked, how many are converted, and which of the nested models M_k are the
// fractions the recipe named. The recipe reader reports a problem at the key that has it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/recipe/recipe.h"

namespace fathom {

enum class DistillOrder { entropy, sensitivity, list };

struct DistillPlan {
  DistillOrder order = DistillOrder::entropy;
  std::vector<int64_t> listed;        // DistillOrder::list: the layers, first converted first
  int64_t count = 0;                  // K: layers converted, one M_k per k = 1..K
  std::vector<int64_t> named_models;  // the k of each fraction distill.layers gave (all of 1..K for a count)
};

// A problem with the section: the key that has it and the sentence that says what is wrong.
struct DistillProblem {
  std::string key;
  std::string message;
};

// The plan for a model of n_layers layers, or the first problem: an order that is neither entropy nor
// sensitivity nor a list of layer indices; an index out of range or listed twice; a count outside
// [1, n_layers] or above the listed layers; a fraction outside (0, 1], or one that converts no layer,
// or as many as another; a loss whose weights are all 0; gate_cos for one-state dsla.
std::optional<DistillProblem> distill_problem(const Recipe& recipe);
// The same, throwing the problem as fathom::Error.
DistillPlan distill_plan(const Recipe& recipe);

}  // namespace fathom
