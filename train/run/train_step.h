// One optimizer step of the trainer, as a function the trainer, the training-step benchmark
// (bench/bench_train_step.cpp) and the HF gradient-parity tests share, so all of them time and check the
// very code that trains.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "data/windows.h"
#include "distributed/data_parallel.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "train/run/extra_losses.h"
#include "train/run/objective.h"

namespace fathom {

struct MicroBatchLoss {
  double ce = 0;     // mean cross-entropy over the counted targets
  double z = 0;      // z-loss term (already weighted)
  TermValues terms;  // every term of the objective (ce and z_loss among them)
};

// Forward, objective (train/run/objective.h; over the targets that are not -100) and backward of one
// micro-batch on `device`: adds d(grad_scale * loss)/d(parameter) to the gradients of the parameters
// that have them. batch.inputs and batch.targets are [B, T] token ids (targets -100 where a position
// has none). `forward` reaches the decoder's forward (e.g. the random router's draw).
MicroBatchLoss accumulate_gradients(const Decoder& model, const TokenBatch& batch, Device device,
                                    const Objective& objective, double grad_scale, const ForwardOptions& forward = {},
                                    const ExtraLosses& extra = nullptr);

struct StepSettings {
  int64_t step = 0;  // the number of this step (1-based), for error messages
  double lr = 0;     // learning rate of this step
  double clip = 0;   // max global gradient norm; 0 disables clipping
  Objective objective = Objective::language_model(0.0);
  int64_t grad_accum = 1;    // micro-batches per step
  ForwardOptions forward{};  // what the forward also reports (the extra losses read it)
  ExtraLosses extra_losses = nullptr;
  // Data parallel: reduces the gradients and losses over ranks and runs the (possibly sharded) update;
  // none: a single process.
  DataParallel* data_parallel = nullptr;
  // Called only when the step fails: a sentence appended to the error (e.g. where the last checkpoint is).
  std::function<std::string()> failure_note = nullptr;
};

struct StepResult {
  double loss = 0;       // mean cross-entropy over the micro-batches (of every rank)
  double z_loss = 0;     // mean z-loss term over the micro-batches
  double grad_norm = 0;  // global gradient norm before clipping (over the trainable parameters)
  TermValues terms;      // each objective term's mean over the micro-batches
};

// zero_grad, grad_accum micro-batches from next_micro_batch (each scaled by 1 / grad_accum), clipping
// and the AdamW update. A non-finite loss or gradient norm throws fathom::Error naming the step before
// the parameters are updated.
StepResult train_step(const Decoder& model, ParameterArena& arena, AdamW& optimizer,
                      const std::function<TokenBatch()>& next_micro_batch, Device device, const StepSettings& settings);

}  // namespace fathom
