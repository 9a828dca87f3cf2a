#include "layers/decoder.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "autograd/ops.h"
#include "autograd/saved_tensor.h"

namespace fathom {

Decoder::Body::Body(const ModelConfig& c)
    : embed_tokens(c.vocab_size, c.d_model, ParameterInit::normal(c.init_std, c.init_cutoff)),
      norm(c.d_model, c.norm_eps) {
  add_child("embed_tokens", embed_tokens);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    layers.push_back(std::make_unique<Block>(c));
    add_child("layers." + std::to_string(i), *layers.back());
  }
  add_child("norm", norm);
}

Decoder::Decoder(const ModelConfig& config) : config_((config.validate(), config)), model_(config_) {
  add_child("model", model_);
  if (!config_.tie_embeddings) {
    lm_head_ = std::make_unique<Linear>(config_.d_model, config_.vocab_size,
                                        ParameterInit::normal(config_.init_std, config_.init_cutoff));
    add_child("lm_head", *lm_head_);
  }
}

Variable Decoder::forward(const Tensor& ids) const { return linear(hidden(ids), head_weight()); }

const Variable& Decoder::head_weight() const {
  return lm_head_ ? lm_head_->weight() : model_.embed_tokens.weight();
}

Variable Decoder::hidden(const Tensor& ids) const {
  FATHOM_CHECK(ids.rank() == 2, "decoder input ids must be [batch, seq], got ", describe(ids));
  const int64_t T = ids.dim(1);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  const Tensor positions = Tensor::from_vector(pos, {T}).to(ids.device());
  std::optional<RecomputeCheapOps> selective;
  if (recompute_ == Recompute::selective) selective.emplace();
  Variable h = model_.embed_tokens.forward(ids);
  // Shared: with recompute, each block's re-run in backward uses the stream after this forward returns.
  std::shared_ptr<DepthStream> depth;
  if (config_.moda())
    depth = std::make_shared<DepthStream>(ids.dim(0), T, depth_slots(), config_.n_kv_heads, config_.head_dim(),
                                          depth_dtype(ids.device()), ids.device());
  const int64_t L = int64_t(model_.layers.size());
  for (int64_t i = 0; i < L; ++i) {
    const Block* block = model_.layers[size_t(i)].get();
    const bool write = i + 1 < L;
    if (recompute_ != Recompute::block) {
      h = block->forward(h, positions, depth.get(), write);
    } else if (!depth) {
      h = checkpoint([block, positions](const Variable& x) { return block->forward(x, positions); }, h);
    } else {
      // The re-run reads and writes the slots this run does (DepthStream::rewind, tie).
      const int64_t written = depth->slots_written();
      h = checkpoint(
          [block, positions, depth, write, written](const Variable& x) {
            depth->rewind(written);
            return depth->tie(block->forward(x, positions, depth.get(), write));
          },
          h);
    }
  }
  return model_.norm.forward(h);
}

void Decoder::set_recompute(Recompute recompute) { recompute_ = recompute; }

std::vector<std::pair<std::string, Shape>> decoder_parameter_shapes(const ModelConfig& config) {
  // A Decoder's parameters are unwritten host allocations until an arena fills them, so building
  // one only to list its names costs address space, not memory.
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const Parameter& p : Decoder(config).parameters()) shapes.emplace_back(p.name, p.var.shape());
  return shapes;
}

// Every block but the last writes its slots: the last block's would have no reader.
int64_t Decoder::depth_slots() const { return std::max<int64_t>(config_.n_layers - 1, 1) * config_.moda_slots_per_block(); }

// The GPU's MoDA kernels read bf16 depth KV; the CPU reference computes in f32.
DType Decoder::depth_dtype(Device device) { return device.is_cuda() ? DType::bf16 : DType::f32; }

size_t Decoder::depth_cache_bytes(int64_t batch, int64_t seq_len, Device device) const {
  if (!config_.moda()) return 0;
  return 2 * size_t(batch * seq_len * depth_slots() * config_.n_kv_heads * config_.head_dim()) *
         dtype_size(depth_dtype(device));
}

}  // namespace fathom
