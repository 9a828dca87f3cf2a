// The OLMo2 decoder: embeddings, blocks, final RMSNorm, lm_head. Parameter names are HF's
// (model.embed_tokens.weight, model.layers.{i}..., model.norm.weight, lm_head.weight). With
// tie_embeddings the lm_head multiplies by model.embed_tokens.weight and has no parameter of its own.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/block.h"
#include "layers/embedding.h"
#include "layers/recompute.h"

namespace fathom {

class Decoder : public Module {
 public:
  explicit Decoder(const ModelConfig& config);
  // ids (I32) [B, T] -> logits [B, T, vocab]. Positions are 0..T-1. Activations take the dtype of
  // the embedding table's compute value: BF16 under mixed precision, else the weights' F32.
  Variable forward(const Tensor& ids) const;
  // The final norm's output [B, T, d] (what the head multiplies), and the head's weight [vocab, d]:
  // lm_head's, or the embedding table when tied. forward(ids) = linear(hidden(ids), head_weight()).
  Variable hidden(const Tensor& ids) const;
  const Variable& head_weight() const;
  // train.recompute (layers/recompute.h). With block, MoDA's re-run reads and rewrites the same
  // depth slots (DepthStream::rewind / tie), so the gradients are the ordinary ones.
  void set_recompute(Recompute recompute);
  const ModelConfig& config() const { return config_; }
  // Bytes of MoDA's depth K/V buffers for one forward of [batch, seq_len] on `device` (0 without MoDA).
  size_t depth_cache_bytes(int64_t batch, int64_t seq_len, Device device = Device::cpu()) const;
  // The dtype of the depth K/V values on `device`: BF16 on CUDA (the MoDA kernels' input), else F32.
  static DType depth_dtype(Device device);

 private:
  // HF nests everything but lm_head under "model.".
  class Body : public Module {
   public:
    explicit Body(const ModelConfig& config);
    Embedding embed_tokens;
    std::vector<std::unique_ptr<Block>> layers;
    RMSNorm norm;
  };
  int64_t depth_slots() const;

  ModelConfig config_;
  Recompute recompute_ = Recompute::none;
  Body model_;
  std::unique_ptr<Linear> lm_head_;  // absent when the embeddings are tied
};

// Every parameter's name and shape for `config`, in the Decoder's order (what a checkpoint of that
// model holds). Validates the config.
std::vector<std::pair<std::string, Shape>> decoder_parameter_shapes(const ModelConfig& config);

}  // namespace fathom
