#include "train/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "autograd/depth_stream.h"
#include "core/error.h"

namespace fathom {

namespace {

constexpr size_t kGemmWorkspace = size_t(32) << 20;  // cuBLASLt's per-stream workspace (kernels/cuda/matmul.cpp)

// Elements and fp32 statistics one block keeps per token for its backward, read off the autograd
// nodes: linears keep their input, RMSNorm its input and rstd, attention q, k, v, o and the lse,
// SwiGLU gate and up; RoPE, reshapes and adds keep nothing.
struct BlockSaved {
  int64_t elements = 0;
  int64_t stats = 0;  // fp32 values
};

// Selective recompute (layers/recompute.h) drops SwiGLU's output, the pre-norm block's normalised
// inputs or the post-norm block's stream after attention, and RoPE's q and k where QK-norm keeps
// their input.
BlockSaved block_saved_per_token(const ModelConfig& c, bool selective) {
  const int64_t d = c.d_model, q = c.n_heads * c.head_dim(), kv = c.n_kv_heads * c.head_dim(), f = c.ffn_hidden;
  const int64_t qk = c.qk_norm ? 1 : 0;
  BlockSaved s;
  // Residual-width tensors: the block input and the sublayer outputs (post-norm) or the normalised
  // inputs (pre-norm): four either way.
  s.elements += 4 * d;
  // q and k after projection (kept by QK-norm) and after RoPE (kept by attention), v, and o.
  s.elements += (1 + qk) * q + q + (1 + qk) * kv + kv;
  // SwiGLU's gate and up, and its output (the down projection's input).
  s.elements += 3 * f;
  s.stats += 2 + 2 * qk + c.n_heads;  // rstd of each norm, the attention lse per query head
  if (selective) {
    s.elements -= f + (c.norm == "pre" ? 2 * d : d);
    if (c.qk_norm) s.elements -= q + kv;
  }
  return s;
}

}  // namespace

size_t MemoryPlan::total() const {
  return master_weights + compute_weights + gradients + optimizer_state + activations + logits + workspace;
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
  line("activations", activations);
  line("logits", logits);
  line("workspace", workspace);
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

  MemoryPlan p;
  p.parameters = parameter_count(c);
  const size_t n = size_t(p.parameters);
  p.master_weights = 4 * n;
  p.compute_weights = in.bf16 ? 2 * n : 0;
  p.gradients = 4 * n;
  p.optimizer_state = 8 * n;

  auto bytes_per_block = [&](bool selective) {
    const BlockSaved saved = block_saved_per_token(c, selective);
    return tokens * (size_t(saved.elements) * act + size_t(saved.stats) * 4);
  };
  const size_t block = bytes_per_block(false);
  const bool selective = in.recompute == Recompute::selective, rerun = in.recompute == Recompute::block;
  // Saved across the whole forward: every block's tensors (fewer with selective recompute), or with
  // block recompute only each block's input.
  const size_t kept_per_block = rerun ? tokens * size_t(c.d_model) * act : bytes_per_block(selective);
  // While one block is backpropagated: its gradients in flight (about its activations' size), plus,
  // with block recompute, its re-run activations.
  const size_t working = block + (rerun ? block : 0);
  // After the blocks: the final norm's input and rstd (the head and loss keep no input, see below).
  const size_t head = tokens * (size_t(c.d_model) * act + 4);
  size_t depth = 0;
  if (c.moda()) {
    // The depth K/V cache of a forward, and what backward keeps for the writers: readers that leave
    // weights keep them with their q and dO until the writers ran; others fill fp32 gradient buffers
    // of the cache's shape (autograd/depth_stream.h).
    const int64_t spb = c.moda_slots_per_block(), slots = std::max<int64_t>(c.n_layers - 1, 1) * spb;
    const size_t slot_elements = tokens * size_t(c.n_kv_heads * c.head_dim());
    depth = 2 * size_t(slots) * slot_elements * act;
    if (depth_reader_leaves_weights(c.n_heads / c.n_kv_heads, c.moda_depth_key == "reader")) {
      for (int64_t layer = 1; layer < c.n_layers; ++layer) {
        const int64_t written = layer * spb, read = written - moda_first_read_slot(written, c.moda_max_slots);
        depth += tokens * size_t(c.n_heads) * (2 * size_t(c.head_dim()) * act + 2 * size_t(read) * 4);
      }
    } else {
      depth += 2 * size_t(slots) * slot_elements * 4;
    }
  }
  p.activations = size_t(c.n_layers) * kept_per_block + working + head + depth;
  // The head and loss (linear_cross_entropy): one chunk of logits at a time (their gradient
  // overwrites them) with its fp32 lse per row, and the gradients it keeps for backward: dh and the
  // head's dW in the weights' fp32.
  const size_t chunk = std::min<size_t>(tokens, size_t(loss_chunk_rows(c.vocab_size, act)));
  p.logits = chunk * (size_t(c.vocab_size) * act + 4) + tokens * size_t(c.d_model) * act +
             4 * size_t(c.vocab_size) * size_t(c.d_model);
  // In fp32 the embeddings' weight gradient is a temporary before it is added into the arena; mixed
  // precision accumulates into the arena directly. (The head's dW is the loss's, counted above.)
  p.workspace = kGemmWorkspace + (in.bf16 ? 0 : 4 * size_t(c.vocab_size) * size_t(c.d_model));
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
  if (plan.total() <= free_bytes) return;
  std::string hints = "lower train.batch_size (now " + std::to_string(input.batch_size) +
                      "; activations and logits scale with it, raise train.grad_accum to keep the tokens per step)";
  if (input.recompute != Recompute::block)
    hints += ", set train.recompute: " + std::string(input.recompute == Recompute::none ? "selective or " : "") +
             "block (activations " + gib(plan.activations) + ")";
  if (!input.bf16) hints += ", use train.precision: bf16";
  FATHOM_FAIL("training needs about ", gib(plan.total()), " on ", device, " but only ", gib(free_bytes),
              " are free (", plan.total(), " > ", free_bytes, " bytes). Estimate:\n", plan.describe(), "To fit: ",
              hints, ".");
}

}  // namespace fathom
