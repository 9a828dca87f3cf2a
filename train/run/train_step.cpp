#include "train/run/train_step.h"

#include <cmath>
#include <optional>
#include <ostream>
#include <vector>

#include "autograd/engine.h"
#include "autograd/gradient_ready.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "optim/grad_clip.h"

namespace fathom {

namespace {

// The caller's note, led by a space when there is one.
struct Note {
  std::string text;
  explicit Note(const StepSettings& settings) : text(settings.failure_note ? settings.failure_note() : "") {}
};
std::ostream& operator<<(std::ostream& out, const Note& note) {
  return note.text.empty() ? out : out << ' ' << note.text;
}

}  // namespace

MicroBatchLoss accumulate_gradients(const Decoder& model, const TokenBatch& batch, Device device,
                                    const Objective& objective, double grad_scale, const ForwardOptions& forward,
                                    const ExtraLosses& extra) {
  FATHOM_CHECK(batch.inputs.rank() == 2 && batch.targets.shape() == batch.inputs.shape(),
               "accumulate_gradients: inputs and targets must both be [B, T], got ", describe(batch.inputs), " and ",
               describe(batch.targets));
  const Tensor inputs = batch.inputs.to(device);
  ModelOutput output = model.forward(inputs, forward);
  if (extra) extra(model, inputs, output);
  const ObjectiveValue value = objective.evaluate(model, output, batch.targets, grad_scale);
  // An unscaled loss is seeded as is, so a single micro-batch computes exactly its own gradients.
  backward(grad_scale != 1.0 ? scale(value.loss, grad_scale) : value.loss);
  auto term = [&](const char* name) {
    const auto it = value.terms.find(name);
    return it == value.terms.end() ? 0.0 : it->second;
  };
  return {term("ce"), term("z_loss"), value.terms};
}

StepResult train_step(const Decoder& model, ParameterArena& arena, AdamW& optimizer,
                      const std::function<TokenBatch()>& next_micro_batch, Device device,
                      const StepSettings& settings) {
  FATHOM_CHECK(settings.grad_accum >= 1, "train_step: grad_accum must be at least 1, got ", settings.grad_accum);
  const double accum = double(settings.grad_accum);
  DataParallel* parallel = settings.data_parallel;
  // Each rank's micro-batch is seeded with 1 / (grad_accum x world): summed over ranks, the global mean.
  const double seed = 1.0 / accum * (parallel ? parallel->loss_scale() : 1.0);
  arena.zero_grad();
  StepResult result;
  for (int64_t micro = 0; micro < settings.grad_accum; ++micro) {
    // Step s's micro-batch m on rank r of W is the run's (((s - 1) * grad_accum + m) * W + r)-th, however
    // often the run resumed.
    ForwardOptions forward = settings.forward;
    const uint64_t micro_index = uint64_t((settings.step - 1) * settings.grad_accum + micro);
    forward.draw = parallel ? micro_index * uint64_t(parallel->world()) + uint64_t(parallel->rank()) : micro_index;
    // The last micro-batch's backward finishes each gradient: its buckets may start reducing then.
    std::optional<ListenToGradients> overlap;
    if (parallel && micro + 1 == settings.grad_accum)
      if (GradientListener* listener = parallel->listen_to_backward()) overlap.emplace(*listener);
    const MicroBatchLoss loss = accumulate_gradients(model, next_micro_batch(), device, settings.objective, seed,
                                                     forward, settings.extra_losses);
    overlap.reset();
    FATHOM_CHECK(std::isfinite(loss.ce) && std::isfinite(loss.z), "training loss is not finite at step ", settings.step,
                 " (cross-entropy ", loss.ce, ", z-loss ", loss.z, "); lower train.optimizer.lr or check the data.",
                 Note(settings));
    result.loss += loss.ce;
    result.z_loss += loss.z;
    for (const auto& [name, term] : loss.terms) result.terms[name] += term / accum;
  }
  result.loss /= accum;
  result.z_loss /= accum;
  if (parallel) {
    // The buckets started during backward are waited for (before the clip and the update).
    result.grad_norm = parallel->reduce_gradients();
    // The logged losses are the global batch's: every rank's, averaged (the terms' names agree on all ranks).
    std::vector<double> values{result.loss, result.z_loss};
    for (const auto& [name, term] : result.terms) values.push_back(term);
    parallel->average(values.data(), int64_t(values.size()));
    result.loss = values[0];
    result.z_loss = values[1];
    size_t i = 2;
    for (auto& [name, term] : result.terms) term = values[i++];
  } else {
    result.grad_norm = grad_norm(arena.grads());
  }
  FATHOM_CHECK(std::isfinite(result.grad_norm), "gradient norm is not finite at step ", settings.step,
               "; lower train.optimizer.lr.", Note(settings));
  // Clipping rides in the update: the optimizer scales each gradient as it reads it.
  const double coefficient = clip_coefficient(result.grad_norm, settings.clip);
  if (parallel)
    parallel->update(optimizer, settings.lr, coefficient);
  else
    optimizer.step(settings.lr, coefficient);
  return result;
}

}  // namespace fathom
