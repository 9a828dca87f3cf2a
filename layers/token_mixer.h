// A block's token mixer: the sublayer that moves information between positions. Attention (with
// MoDA's depth reads) is the first kind; each kind owns its parameters, says what it costs, and is
// made by the factory it registers in layers/layer_kinds.cpp. Block, Decoder, the trainer and the
// memory plan know only this interface (docs/DESIGN.md section 5, "Layer kinds are plug-ins").
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/depth_stream.h"
#include "kernels/matmul/skinny_matmul.h"
#include "layers/layer_report.h"
#include "layers/module.h"
#include "layers/rope_angles.h"

namespace fathom {

// What a mixer keeps between decoding steps (attention: its KV cache; DSLA: its states). Made by the
// mixer for a batch and a capacity in positions, before the prompt is read. Each sequence of the batch
// holds its own number of positions (a batch of prompts of different lengths).
class MixerCache {
 public:
  virtual ~MixerCache() = default;
  virtual size_t bytes() const = 0;               // device bytes it holds
  virtual size_t bytes_per_position() const = 0;  // what each cached position costs (0: constant state)
  // Positions the state holds: the longest sequence's (0 for kinds whose state does not grow with them).
  virtual int64_t length() const { return 0; }
  // Whether a decoding step of one token per sequence over this state can be captured once as a CUDA
  // graph and replayed (train/generate/decode_step.h): its kernels find each sequence's position in
  // MixerInputs::device_past, keep the state at fixed addresses, and the only host-side state is
  // the counts of positions, which a replay moves on with set_lengths().
  virtual bool replayable() const { return false; }
  // Only for replayable states: the host's counts of positions held, one per sequence.
  virtual void set_lengths(const std::vector<int64_t>& positions);
  // Takes sequence 0 of `single` (a cache this mixer made for a batch of 1, which has read a prompt
  // alone) as sequence `row` of this batch: what a ragged batch is prefilled with, one prompt at a
  // time (train/generate/generator.h). The default refuses: a kind without it decodes batches of one
  // prompt only.
  virtual void copy_sequence(int64_t row, const MixerCache& single);
  // The K and V caches [B, Hk, capacity, d] of kinds that keep them as attention does, for a decoding step that
  // reads and writes them itself (train/generate/persistent_step.h); none by default.
  virtual std::optional<std::pair<Tensor, Tensor>> key_value() const { return std::nullopt; }
};

// What a layer reads besides its input. Where it reports (losses, taps) is its LayerReport.
struct MixerInputs {
  const Tensor& positions;       // I32 [T] (shared by the batch) or [B, T]: RoPE's positions
  DepthStream* depth = nullptr;  // the depth stream of kinds that read one (MoDA), or none
  bool write_depth = false;      // also write this layer's own slot(s) to it
  // Decoding: this layer's state, holding every earlier position of the batch; the input is the next
  // positions (`positions` gives their absolute indices) and the mixer extends the state by them.
  MixerCache* cache = nullptr;
  // Decoding: the positions each sequence held before this step, I32 [B] on the decoding state's device
  // (host memory on the CPU; kernels/attention/kv_cache.h). Kernels that depend on the positions read
  // them there rather than take them from the host, so a GPU step can be replayed as a CUDA graph, and
  // each sequence of a ragged batch writes and reads at its own length. Null outside decoding, and for
  // caches whose counts the layer keeps itself (MoD's per-sequence block caches).
  const Tensor* device_past = nullptr;
  // Evaluate as decoding decides: a layer whose training forward looks ahead along the sequence (MoD's
  // top-k routing) decides per token instead. Decoding (a cache) always does.
  bool as_decoded = false;
  // This forward's number, the same when train.recompute: block re-runs it: a stochastic layer's draws.
  uint64_t draw = 0;
  // RoPE's angles for `positions`, made at the first rotation and shared by every layer after it. Copies
  // of these inputs share the cache; inputs built for other positions (MoD's routed tokens) get their own.
  std::shared_ptr<RopeAngleCache> rope_angles = std::make_shared<RopeAngleCache>();
};

// What one layer costs per token of a training micro-batch. The memory plan and MFU are sums of these
// (train/measure/memory_plan.cpp, train/measure/throughput.cpp), so a new kind is counted by reporting its own.
struct LayerCost {
  int64_t saved_elements = 0;    // activation-dtype elements kept for backward
  int64_t rebuilt_elements = 0;  // of saved_elements, those train.recompute: selective rebuilds instead
  int64_t saved_stats = 0;       // fp32 values kept for backward
  // MoDA reads: what a reader keeps until the writers of its slots have run backward (under any
  // recompute mode): activation elements and fp32 values.
  int64_t depth_elements = 0;
  int64_t depth_stats = 0;
  // Training FLOPs (forward and backward) of the layer's weights: 6 per weight for every token they
  // see (fewer than every token in a MoD routed block).
  double weight_flops = 0;
  // Training FLOPs (forward and backward) beyond those: attention's scores and values.
  double extra_flops = 0;

  LayerCost& operator+=(const LayerCost& other);
};

// Where in the model a cost is asked for.
struct CostQuery {
  int64_t seq_len = 0;
  int64_t depth_slots_before = 0;  // MoDA slots written by the earlier layers
};

class RMSNorm;

class TokenMixer : public Module {
 public:
  // x [B, T, d_model] -> [B, T, d_model].
  virtual Variable forward(const Variable& x, const MixerInputs& inputs, const LayerReport& report) const = 0;
  // The previous block's last residual step, then forward, with the step inside the mixer's first launch where a
  // decoding step allows (project_each_after_residual_step): {the stream, the mixer's output}; otherwise nothing, and
  // the caller runs both. Post-norm: `norm` joins sublayer_out to residual, and the mixer reads the stream.
  // Pre-norm: the stream is residual + sublayer_out, and the mixer reads `norm` (the block's input norm) of it.
  virtual std::optional<std::pair<Variable, Variable>> forward_after_residual_step(
      ResidualStep /*kind*/, const Variable& /*residual*/, const Variable& /*sublayer_out*/, const RMSNorm& /*norm*/,
      const MixerInputs& /*inputs*/, const LayerReport& /*report*/) const {
    return std::nullopt;
  }
  virtual LayerCost cost(const CostQuery& query) const = 0;
  // The decoding state for `batch` sequences of up to `capacity` positions, in `dtype` on `device`.
  virtual std::unique_ptr<MixerCache> make_cache(int64_t batch, int64_t capacity, DType dtype, Device device) const = 0;
  // MoDA slots this mixer writes when asked to (its attention-side slot; 0 for kinds without one).
  virtual int64_t depth_slots_written() const { return 0; }
};

}  // namespace fathom
