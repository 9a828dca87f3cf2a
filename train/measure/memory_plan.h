// Device memory a training run needs, estimated from the recipe before anything is allocated, so a
// run that cannot fit fails at start with the numbers and the knobs to turn, not with an OOM
// mid-step. The estimate counts what fathom's autograd actually keeps
// (docs/decisions/06-mixed-precision-recompute-and-the-memory-plan.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "layers/model_config.h"
#include "layers/recompute.h"

namespace fathom {

// Distillation (DESIGN.md 4.4): the frozen teacher beside the student, and what the teacher terms add
// to each step.
struct TeacherMemoryInput {
  ModelConfig model;          // the teacher's
  bool bf16 = false;          // a bf16 compute copy beside its fp32 weights, and bf16 activations
  bool logits = false;        // logit_kl: the teacher's logits, and the student's whole logits and their gradient
  bool layer_output = false;  // layer_align: the teacher's forward keeps every layer's output
  // Its weights are on the device already (loaded before the run starts), so the device's free
  // memory no longer includes them: the fit check gives them back.
  bool resident = false;
};

struct MemoryPlanInput {
  ModelConfig model;
  int64_t batch_size = 0;  // sequences per micro-batch
  int64_t seq_len = 0;
  bool bf16 = false;                      // mixed precision: bf16 weight copy and activations
  Recompute recompute = Recompute::none;  // train.recompute
  int64_t frozen_parameters = 0;          // train.frozen: elements with no gradient or optimizer state
  // Data parallel (distributed/data_parallel.h): the plan is one rank's.
  int64_t world = 1;                                         // ranks
  int64_t zero = 0;                                          // train.zero: 1 shards AdamW's moments over the ranks
  bool bf16_wire = false;                                    // train.grad_reduce: bf16
  std::optional<TeacherMemoryInput> teacher = std::nullopt;  // a distillation's teacher
};

struct MemoryPlan {
  int64_t parameters = 0;         // every parameter, frozen ones included
  size_t master_weights = 0;      // fp32 parameter arena
  size_t compute_weights = 0;     // bf16 copy of the arena (mixed precision only)
  size_t gradients = 0;           // fp32 gradient arena
  size_t optimizer_state = 0;     // AdamW's two fp32 moments (ZeRO-1: this rank's shard of them)
  size_t reduction = 0;           // data parallel: ZeRO-1's fp32 staging of the padded arena and the
                                  // shard's sums, or every bucket's bf16 copy while the buckets overlap
                                  // backward (train.grad_reduce: bf16)
  size_t activations = 0;         // tensors saved for backward at the end of the forward, plus the
                                  // working set of the block being backpropagated
  size_t logits = 0;              // the head and loss: one chunk of logits, and the dh and dW they keep
  size_t workspace = 0;           // GEMM workspace and the fp32 path's weight-gradient temporaries
  size_t teacher_weights = 0;     // a distillation's teacher: fp32 weights and their bf16 copy
  size_t teacher_forward = 0;     // its NoGrad forward's working set, the targets it hands the step (logits,
                                  // layer output), and the student's whole logits and their gradient
  bool teacher_resident = false;  // teacher_weights are on the device already (TeacherMemoryInput::resident)

  size_t total() const;
  // A few lines: one per part, in GiB, and the total.
  std::string describe() const;
};

MemoryPlan plan_training_memory(const MemoryPlanInput& input);

// Throws, naming the requested and the available bytes and what to change (a smaller
// train.batch_size, train.recompute: block, train.precision: bf16), when the plan exceeds free_bytes
// (plus the teacher's weights when they are resident: free_bytes was measured with them loaded).
void check_memory_plan_fits(const MemoryPlan& plan, size_t free_bytes, const MemoryPlanInput& input,
                            const std::string& device);

// Rows of logits the training step's loss forms at once (linear_cross_entropy): as many as
// fit in kLossChunkBytes, a multiple of 64 where there are that many.
constexpr size_t kLossChunkBytes = size_t(1) << 30;
int64_t loss_chunk_rows(int64_t vocab, size_t logit_bytes);

// Bytes as "12.34 GiB".
std::string gib(size_t bytes);

}  // namespace fathom
