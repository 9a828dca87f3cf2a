// The loss of one converted layer's training (DESIGN.md 4.4): the recipe's distill.loss
// weights as the run's objective terms, and the teacher terms each micro-batch adds to the student's
// output: logit_kl (KL(teacher || student) on the final logits at distill.temperature), layer_align
// (the converted layer's output against the teacher's same layer: mse, or KL over the hidden
// dimension) and gate_cos (which the dsla layer reports itself).
#pragma once
#include <map>
#include <string>

#include "train/distill/distill_teacher.h"
#include "train/recipe/recipe.h"
#include "train/run/train_step.h"

namespace fathom {

// train.loss of a layer's run: distill.loss with ce's z-loss off.
std::map<std::string, double> distill_objective_weights(const Recipe::Distill& distill);

// What the student's forward must report for these weights when converting `layer`: the layer
// outputs, and that layer's gate similarity (the frozen dsla layers converted before report none).
ForwardOptions distill_forward_options(const Recipe::Distill& distill, int64_t layer);

// The teacher terms for converting `layer`; the teacher must outlive the result.
ExtraLosses distill_teacher_losses(const Teacher& teacher, const Recipe::Distill& distill, int64_t layer);

}  // namespace fathom
