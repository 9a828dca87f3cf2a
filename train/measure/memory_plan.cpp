#include "train/measure/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "autograd/depth_stream.h"
#include "core/error.h"
#include "layers/decoder.h"

namespace fathom {

namespace {

constexpr size_t kGemmWorkspace = size_t(32) << 20;  // cuBLASLt's per-stream workspace (kernels/matmul/matmul_cuda.cpp)

// The teacher's part of a distillation step (the student's activations are already in the plan).
void plan_teacher_memory(const TeacherMemoryInput& t, int64_t batch_size, int64_t seq_len, size_t student_act,
                         MemoryPlan& p) {
  const ModelConfig& c = t.model;
  c.validate();
  const size_t act = t.bf16 ? 2 : 4;
  const size_t tokens = size_t(batch_size) * size_t(seq_len);
  const Decoder teacher(c);  // unwritten host allocations, as above
  size_t n = 0;
  for (const Parameter& parameter : teacher.parameters()) n += size_t(parameter.var.shape().numel());
  p.teacher_weights = n * (t.bf16 ? 6 : 4);
  p.teacher_resident = t.resident;
  // Under NoGrad a block's tensors live only while it runs: at most what it would save for backward,
  // beside the residual stream; with layer_align every layer's output is kept until the forward ends.
  size_t block = 0;
  for (const LayerCost& cost : teacher.layer_costs(seq_len))
    block = std::max(block, tokens * (size_t(cost.saved_elements) * act + size_t(cost.saved_stats) * 4));
  const size_t hidden = tokens * size_t(c.d_model) * act;
  const size_t layer_outputs = t.layer_output ? size_t(c.n_layers) * hidden : 0;
  // What the step holds until its backward: the teacher's logits (and one layer's output), the
  // student's whole logits (logit_kl forms them at once, not in chunks) with their fp32 lse and the
  // teacher's, and in the backward the logits' gradient.
  const size_t vocab_rows = tokens * size_t(c.vocab_size);
  const size_t logits = t.logits ? vocab_rows * act + vocab_rows * student_act * 2 + tokens * 8 : 0;
  p.teacher_forward = 2 * hidden + block + layer_outputs + logits;
}

}  // namespace

size_t MemoryPlan::total() const {
  return master_weights + compute_weights + gradients + optimizer_state + reduction + activations + logits + workspace +
         teacher_weights + teacher_forward;
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  return text;
}

std::string MemoryPlan::describe() const {
  std::string out;
  auto line = [&](const char* what, size_t bytes) {
    if (bytes == 0) return;
    char text[96];
    std::snprintf(text, sizeof text, "  %-16s %12s\n", what, gib(bytes).c_str());
    out += text;
  };
  line("weights (fp32)", master_weights);
  line("weights (bf16)", compute_weights);
  line("gradients", gradients);
  line("optimizer", optimizer_state);
  line("reduction", reduction);
  line("activations", activations);
  line("logits", logits);
  line("workspace", workspace);
  line(teacher_resident ? "teacher (loaded)" : "teacher weights", teacher_weights);
  line("teacher forward", teacher_forward);
  line("total", total());
  return out;
}

MemoryPlan plan_training_memory(const MemoryPlanInput& in) {
  in.model.validate();
  FATHOM_CHECK(in.batch_size >= 1 && in.seq_len >= 1, "memory plan: batch size and sequence length must be >= 1, got ",
               in.batch_size, " and ", in.seq_len);
  const ModelConfig& c = in.model;
  const size_t act = in.bf16 ? 2 : 4;  // bytes of an activation element
  const size_t tokens = size_t(in.batch_size) * size_t(in.seq_len);

  const Decoder model(c);  // its parameters are unwritten host allocations: address space, not memory
  MemoryPlan p;
  p.parameters = 0;
  for (const Parameter& parameter : model.parameters()) p.parameters += parameter.var.shape().numel();
  FATHOM_CHECK(in.frozen_parameters >= 0 && in.frozen_parameters <= p.parameters,
               "memory plan: frozen parameters must be in [0, ", p.parameters, "], got ", in.frozen_parameters);
  const size_t n = size_t(p.parameters), trainable = size_t(p.parameters - in.frozen_parameters);
  p.master_weights = 4 * n;
  p.compute_weights = in.bf16 ? 2 * n : 0;
  // Frozen parameters hold no gradient and no optimizer state.
  p.gradients = 4 * trainable;
  FATHOM_CHECK(in.world >= 1 && (in.zero == 0 || in.zero == 1), "memory plan: world must be >= 1 and zero 0 or 1, got ",
               in.world, " and ", in.zero);
  const size_t world = size_t(in.world), shard = (trainable + world - 1) / world;  // ZeRO-1: padded
  p.optimizer_state = 8 * (in.zero == 1 ? shard : trainable);
  // ZeRO-1: the fp32 staging of the padded arena and the shard's sums; with bf16 on the wire, also the
  // bf16 copies of both and the shard's conversion back to fp32 (DataParallel::reduce_gradients).
  if (in.world > 1)
    p.reduction = in.zero == 1
                      ? 4 * (shard * world + shard) + (in.bf16_wire ? 2 * (shard * world + shard) + 4 * shard : 0)
                      : (in.bf16_wire ? 2 * trainable : 0);

  // What each block keeps for its backward, as the block and its mixer report it.
  auto block_bytes = [&](const LayerCost& cost, bool selective) {
    const int64_t elements = cost.saved_elements - (selective ? cost.rebuilt_elements : 0);
    return tokens * (size_t(elements) * act + size_t(cost.saved_stats) * 4);
  };
  const bool selective = in.recompute == Recompute::selective, rerun = in.recompute == Recompute::block;
  size_t kept = 0, working = 0, depth = 0;
  for (const LayerCost& cost : model.layer_costs(in.seq_len)) {
    // Saved across the whole forward: every block's tensors (fewer with selective recompute), or with
    // block recompute only each block's input.
    kept += rerun ? tokens * size_t(c.d_model) * act : block_bytes(cost, selective);
    // While one block is backpropagated: its gradients in flight (about its activations' size), plus,
    // with block recompute, its re-run activations.
    working = std::max(working, block_bytes(cost, false) * (rerun ? 2 : 1));
    // MoDA readers keep their q, dO and weights until the writers ran, under any recompute.
    depth += tokens * (size_t(cost.depth_elements) * act + size_t(cost.depth_stats) * 4);
  }
  // After the blocks: the final norm's input and rstd (the head and loss keep no input, see below).
  const size_t head = tokens * (size_t(c.d_model) * act + 4);
  if (c.options.get<MoDAConfig>().enabled()) {
    // The depth K/V cache of a forward; readers that leave no weights fill fp32 gradient buffers of the
    // cache's shape instead (autograd/depth_stream.h).
    const size_t cache_elements = tokens * size_t(model.depth_slots() * c.n_kv_heads * c.head_dim());
    depth += 2 * cache_elements * act;
    if (!depth_reader_leaves_weights(c.n_heads / c.n_kv_heads,
                                     c.options.get<MoDAConfig>().depth_key == DepthKey::reader))
      depth += 2 * cache_elements * 4;
  }
  p.activations = kept + working + head + depth;
  // The head and loss (linear_cross_entropy): one chunk of logits at a time (their gradient
  // overwrites them) with its fp32 lse per row, and the gradients it keeps for backward: dh and the
  // head's dW in the weights' fp32.
  const size_t chunk = std::min<size_t>(tokens, size_t(loss_chunk_rows(c.vocab_size, act)));
  p.logits = chunk * (size_t(c.vocab_size) * act + 4) + tokens * size_t(c.d_model) * act +
             4 * size_t(c.vocab_size) * size_t(c.d_model);
  // In fp32 the embeddings' weight gradient is a temporary before it is added into the arena; mixed
  // precision accumulates into the arena directly. (The head's dW is the loss's, counted above.)
  p.workspace = kGemmWorkspace + (in.bf16 ? 0 : 4 * size_t(c.vocab_size) * size_t(c.d_model));
  if (in.teacher) plan_teacher_memory(*in.teacher, in.batch_size, in.seq_len, act, p);
  return p;
}

int64_t loss_chunk_rows(int64_t vocab, size_t logit_bytes) {
  FATHOM_CHECK(vocab >= 1 && logit_bytes >= 1, "loss_chunk_rows: vocab and logit bytes must be >= 1, got ", vocab,
               " and ", logit_bytes);
  const int64_t rows = std::max<int64_t>(1, int64_t(kLossChunkBytes / (size_t(vocab) * logit_bytes)));
  return rows >= 64 ? rows / 64 * 64 : rows;
}

void check_memory_plan_fits(const MemoryPlan& plan, size_t free_bytes, const MemoryPlanInput& input,
                            const std::string& device) {
  if (plan.teacher_resident) free_bytes += plan.teacher_weights;
  if (plan.total() <= free_bytes) return;
  std::string hints = "lower train.batch_size (now " + std::to_string(input.batch_size) +
                      "; activations and logits scale with it, raise train.grad_accum to keep the tokens per step)";
  if (input.recompute != Recompute::block)
    hints += ", set train.recompute: " + std::string(input.recompute == Recompute::none ? "selective or " : "") +
             "block (activations " + gib(plan.activations) + ")";
  if (!input.bf16) hints += ", use train.precision: bf16";
  if (input.teacher && input.teacher->logits)
    hints += "; the teacher's logits and the student's (" + gib(plan.teacher_forward) +
             " with the teacher's forward) scale with train.batch_size too";
  FATHOM_FAIL("training needs about ", gib(plan.total()), " on ", device, " but only ", gib(free_bytes),
              plan.teacher_resident ? " (with the loaded teacher's weights)" : "", " are free (", plan.total(), " > ",
              free_bytes, " bytes). Estimate:\n", plan.describe(), "To fit: ", hints, ".");
}

}  // namespace fathom
