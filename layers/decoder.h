// The OLMo2 decoder: embeddings, blocks, final RMSNorm, untied lm_head. Parameter names are HF's
// (model.embed_tokens.weight, model.layers.{i}..., model.norm.weight, lm_head.weight).
#pragma once
#include <memory>
#include <vector>

#include "layers/block.h"
#include "layers/embedding.h"

namespace fathom {

class Decoder : public Module {
 public:
  explicit Decoder(const ModelConfig& config);
  // ids (I32) [B, T] -> logits [B, T, vocab]. Positions are 0..T-1.
  Variable forward(const Tensor& ids) const;
  const ModelConfig& config() const { return config_; }
  // Bytes of MoDA's depth K/V buffers for one forward of [batch, seq_len] (0 without MoDA).
  size_t depth_cache_bytes(int64_t batch, int64_t seq_len) const;

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
  Body model_;
  Linear lm_head_;
};

}  // namespace fathom
