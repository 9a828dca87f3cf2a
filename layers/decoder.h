// The OLMo2 decoder: embeddings, blocks, final RMSNorm, lm_head. Parameter names are HF's
// (model.embed_tokens.weight, model.layers.{i}..., model.norm.weight, lm_head.weight). With
// tie_embeddings the lm_head multiplies by model.embed_tokens.weight and has no parameter of its own.
#pragma once
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "layers/block.h"
#include "layers/embedding.h"
#include "layers/recompute.h"

namespace fathom {

// What a forward is asked for besides its output: per-layer observations (distillation's alignment
// and layer ranking, MoD's routing counts) and how stochastic or look-ahead layers decide.
struct ForwardOptions {
  bool layer_outputs = false;  // every block's output hidden state [B, T, d]
  // Taps every layer is asked for, by the names kinds register (layers/layer_kinds.h): e.g.
  // attention's "attention_entropy", MoD's "mod.routing". Layers without the tap ignore it.
  TapSet taps{};
  // Taps asked of one layer only: {layer, name} (distillation's gate_cos of the converted layer).
  std::vector<std::pair<int64_t, std::string>> layer_taps{};
  // Evaluate as decoding decides (MixerInputs::as_decoded: MoD routes by its causal router; evaluation
  // only, under NoGrad).
  bool as_decoded = false;
  // Which draw stochastic layers (MoD's random router) use. Training names it by its micro-batch so a
  // resumed run draws what the uninterrupted one would; unset, the decoder counts its forwards.
  std::optional<uint64_t> draw = std::nullopt;
};

// What a forward returns.
struct ModelOutput {
  Variable hidden;                      // the final norm's output [B, T, d] (what the head multiplies)
  std::vector<NamedLoss> aux_losses;    // in layer order; the objective weighs them by name
  std::vector<Variable> layer_outputs;  // per block, when asked
  // Per block, when some tap is asked: what the block measured (empty for a block without the taps).
  std::vector<LayerMeasures> measures;
};

// Incremental decoding's state: every layer's cache for a batch of sequences, and how many positions
// each sequence holds. A batch of prompts of different lengths (a ragged batch) keeps different counts:
// each sequence writes its keys at its own position, attends over its own length and rotates by its
// own RoPE positions, so its tokens are those it would get decoded alone.
struct DecodeState {
  std::vector<std::unique_ptr<MixerCache>> layers;
  int64_t batch = 0, capacity = 0;
  std::vector<int64_t> lengths;  // per sequence: the positions it holds
  // `lengths` as I32 [batch] on the state's device (host memory on the CPU), which the step's kernels
  // read (MixerInputs::device_past): on a GPU a step finds its positions there, so it can be replayed
  // as a CUDA graph.
  Tensor device_lengths;
  int64_t longest() const;            // the most positions a sequence holds
  int64_t shortest() const;           // the fewest
  size_t bytes() const;               // what the caches hold on the device
  size_t bytes_per_position() const;  // what each cached position costs, summed over the layers
  // Whether every layer's state can be replayed (MixerCache::replayable).
  bool replayable() const;
  // A replayed step's host-side bookkeeping: every sequence's count, and every layer's, become
  // `positions` (one per sequence); the device's counts are the replay's to move.
  void set_lengths(const std::vector<int64_t>& positions);
  // set_lengths with every count one more: the host's side of a step whose device side moved the counts itself.
  void count_one_more_position();
  // Throws unless every sequence has room for T more positions.
  void check_room_for(int64_t T) const;
  // Takes sequence 0 of `single`, a one-sequence state of the same model that has read a prompt alone,
  // as sequence `row`: every layer's cache (MixerCache::copy_sequence) and its count. How a ragged batch
  // is prefilled.
  void take_sequence(int64_t row, const DecodeState& single);
};

class Decoder : public Module {
 public:
  explicit Decoder(const ModelConfig& config);
  // ids (I32) [B, T] -> the output object. Positions are 0..T-1. Activations take the dtype of the
  // embedding table's compute value: BF16 under mixed precision, else the weights' F32.
  ModelOutput forward(const Tensor& ids, const ForwardOptions& options = {}) const;
  // logits [B, T, vocab] = linear(forward(ids).hidden, head_weight()); the head's weight [vocab, d] is
  // lm_head's, or the embedding table when tied.
  Variable logits(const Tensor& ids) const;
  const Variable& head_weight() const;
  // Caches for decoding `batch` sequences of up to `capacity` positions, in `dtype` on `device` (the
  // activations' dtype: BF16 with a mixed-precision arena, else F32).
  DecodeState start_decoding(int64_t batch, int64_t capacity, DType dtype, Device device) const;
  // Reads the next ids [batch, Tq] of every sequence b at positions state.lengths[b] .. + Tq - 1 and
  // extends the caches by them; returns the final norm's output for them [batch, Tq, d]. Each
  // position sees exactly what a forward over its whole sequence would (the first call reads the
  // prompt as training does). No gradient: run under NoGrad.
  Variable decode(const Tensor& ids, DecodeState& state) const;
  // Each block's training cost per token for sequences of seq_len (the memory plan and MFU sum these).
  std::vector<LayerCost> layer_costs(int64_t seq_len) const;
  // The layers: Blocks, and with MoD the routed blocks that wrap them (where mod.every says).
  const std::vector<std::unique_ptr<DecoderLayer>>& blocks() const { return model_.layers; }
  // train.recompute (layers/recompute.h). With block, MoDA's re-run reads and rewrites the same
  // depth slots (DepthStream::rewind / tie), so the gradients are the ordinary ones.
  void set_recompute(Recompute recompute);
  const ModelConfig& config() const { return config_; }
  // Bytes of MoDA's depth K/V buffers for one forward of [batch, seq_len] on `device` (0 without MoDA).
  size_t depth_cache_bytes(int64_t batch, int64_t seq_len, Device device = Device::cpu()) const;
  // The slots of a forward's depth stream: every block but the last writes (0 without MoDA).
  int64_t depth_slots() const;
  // The dtype of the depth K/V values on `device`: BF16 on CUDA (the MoDA kernels' input), else F32.
  static DType depth_dtype(Device device);

 private:
  // HF nests everything but lm_head under "model.".
  class Body : public Module {
   public:
    explicit Body(const ModelConfig& config);
    Embedding embed_tokens;
    std::vector<std::unique_ptr<DecoderLayer>> layers;
    RMSNorm norm;
  };
  // The MoDA depth stream of a forward over ids [B, T] (none without MoDA).
  std::shared_ptr<DepthStream> new_depth_stream(const Tensor& ids) const;

  ModelConfig config_;
  Recompute recompute_ = Recompute::none;
  mutable uint64_t forwards_ = 0;  // forwards run: MixerInputs::draw
  Body model_;
  std::unique_ptr<Linear> lm_head_;  // absent when the embeddings are tied
};

// Every parameter's name and shape for `config`, in the Decoder's order (what a checkpoint of that
// model holds), as the layers report them. Validates the config.
std::vector<std::pair<std::string, Shape>> decoder_parameter_shapes(const ModelConfig& config);
// Their element count: embeddings, every block's mixer, MLP, norms and MoDA writers, the final norm
// and the lm_head (none of its own when tie_embeddings).
int64_t parameter_count(const ModelConfig& config);

}  // namespace fathom
