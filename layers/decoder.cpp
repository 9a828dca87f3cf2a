#include "layers/decoder.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "autograd/ops.h"
#include "autograd/saved_tensor.h"
#include "kernels/attention/kv_cache.h"
#include "layers/layer_kinds.h"
#include "layers/moda_config.h"

namespace fathom {

Decoder::Body::Body(const ModelConfig& c)
    : embed_tokens(c.vocab_size, c.d_model, ParameterInit::normal(c.init_std, c.init_cutoff)),
      norm(c.d_model, c.norm_eps) {
  add_child("embed_tokens", embed_tokens);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    std::unique_ptr<DecoderLayer> layer;  // a feature's (MoD's routed block), else a Block
    for (const LayerKind& kind : layer_kinds())
      if (kind.make_layer && !layer) layer = kind.make_layer(c, i);
    layers.push_back(layer ? std::move(layer) : std::make_unique<Block>(c, i));
    add_child("layers." + std::to_string(i), *layers.back());
  }
  add_child("norm", norm);
}

Decoder::Decoder(const ModelConfig& config) : config_((config.validate(), config)), model_(config_) {
  add_child("model", model_);
  if (!config_.tie_embeddings) {
    lm_head_ = std::make_unique<Linear>(config_.d_model, config_.vocab_size,
                                        ParameterInit::normal(config_.init_std, config_.init_cutoff));
    lm_head_->keep_out_of_fp8();  // the fused cross-entropy head reads it: logits stay bf16 (precision-sensitive)
    add_child("lm_head", *lm_head_);
  }
}

Variable Decoder::logits(const Tensor& ids) const { return linear(forward(ids).hidden, head_weight()); }

const Variable& Decoder::head_weight() const { return lm_head_ ? lm_head_->weight() : model_.embed_tokens.weight(); }

namespace {
// Positions first .. first + T - 1, shared by the batch.
Tensor positions_from(int64_t first, int64_t T, Device device) {
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), int32_t(first));
  return Tensor::from_vector(pos, {T}).to(device);
}
}  // namespace

std::shared_ptr<DepthStream> Decoder::new_depth_stream(const Tensor& ids) const {
  if (!config_.options.get<MoDAConfig>().enabled()) return nullptr;
  return std::make_shared<DepthStream>(ids.dim(0), ids.dim(1), depth_slots(), config_.n_kv_heads, config_.head_dim(),
                                       depth_dtype(ids.device()), ids.device());
}

ModelOutput Decoder::forward(const Tensor& ids, const ForwardOptions& options) const {
  FATHOM_CHECK(ids.rank() == 2, "decoder input ids must be [batch, seq], got ", describe(ids));
  const int64_t T = ids.dim(1);
  const Tensor positions = positions_from(0, T, ids.device());
  std::optional<RecomputeCheapOps> selective;
  if (recompute_ == Recompute::selective) selective.emplace();
  ModelOutput out;
  Variable h = model_.embed_tokens.forward(ids);
  // Shared: with recompute, each block's re-run in backward uses the stream after this forward returns.
  const std::shared_ptr<DepthStream> depth = new_depth_stream(ids);
  const int64_t L = int64_t(model_.layers.size());
  const bool measured = !options.taps.empty() || !options.layer_taps.empty();
  if (measured) out.measures.resize(size_t(L));
  const uint64_t forward_counted = forwards_++;
  MixerInputs inputs{positions, depth.get()};
  inputs.as_decoded = options.as_decoded;
  inputs.draw = options.draw.value_or(forward_counted);
  for (int64_t i = 0; i < L; ++i) {
    const DecoderLayer* block = model_.layers[size_t(i)].get();
    inputs.write_depth = i + 1 < L;
    // The taps asked of every layer, plus those asked of this one (copied only when there are such).
    const TapSet* taps = &options.taps;
    TapSet with_layer_taps;
    for (const auto& [layer, tap] : options.layer_taps)
      if (layer == i) {
        if (taps != &with_layer_taps) taps = &(with_layer_taps = options.taps);
        with_layer_taps.insert(tap);
      }
    // Taps are read while the forward runs, so a block asked for one runs as recorded; a layer that is
    // not rerunnable recomputes inside itself.
    if (recompute_ != Recompute::block || !taps->empty() || !block->rerunnable()) {
      h = block->forward(h, inputs, LayerReport(&out.aux_losses, taps, measured ? &out.measures[size_t(i)] : nullptr));
    } else if (!depth) {
      h = checkpoint(
          [block, positions, rope = inputs.rope_angles](const Variable& x) {
            MixerInputs rerun{positions};
            rerun.rope_angles = rope;
            return block->forward(x, rerun, LayerReport());
          },
          h, block->parameter_variables());
    } else {
      // The re-run reads and writes the slots this run does (DepthStream::rewind, tie).
      const int64_t written = depth->slots_written();
      const bool write = inputs.write_depth;
      h = checkpoint(
          [block, positions, depth, write, written, rope = inputs.rope_angles](const Variable& x) {
            depth->rewind(written);
            MixerInputs rerun{positions, depth.get(), write};
            rerun.rope_angles = rope;
            return depth->tie(block->forward(x, rerun, LayerReport()));
          },
          h, block->parameter_variables());
    }
    if (options.layer_outputs) out.layer_outputs.push_back(h);
  }
  out.hidden = model_.norm.forward(h);
  return out;
}

int64_t DecodeState::longest() const { return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end()); }

int64_t DecodeState::shortest() const {
  return lengths.empty() ? 0 : *std::min_element(lengths.begin(), lengths.end());
}

size_t DecodeState::bytes() const {
  size_t total = 0;
  for (const auto& cache : layers) total += cache->bytes();
  return total;
}

size_t DecodeState::bytes_per_position() const {
  size_t total = 0;
  for (const auto& cache : layers) total += cache->bytes_per_position();
  return total;
}

bool DecodeState::replayable() const {
  for (const auto& cache : layers)
    if (!cache->replayable()) return false;
  return true;
}

void DecodeState::set_lengths(const std::vector<int64_t>& positions) {
  FATHOM_CHECK(int64_t(positions.size()) == batch, "decoding state: ", positions.size(), " lengths for a batch of ",
               batch);
  for (int64_t n : positions)
    FATHOM_CHECK(n >= 0 && n <= capacity, "decoding state: length ", n, " outside its capacity of ", capacity);
  for (const auto& cache : layers) cache->set_lengths(positions);
  lengths = positions;
}

void DecodeState::count_one_more_position() {
  std::vector<int64_t> after = lengths;
  for (int64_t& n : after) ++n;
  set_lengths(after);
}

void DecodeState::check_room_for(int64_t T) const {
  FATHOM_CHECK(longest() + T <= capacity, "decode: ", T, " more position", T == 1 ? "" : "s", " after ", longest(),
               T == 1 ? " exceeds" : " exceed", " the cache's capacity of ", capacity);
}

void DecodeState::take_sequence(int64_t row, const DecodeState& single) {
  FATHOM_CHECK(single.batch == 1 && single.layers.size() == layers.size(),
               "decoding state: a sequence is taken from a one-sequence state of the same model, got a batch of ",
               single.batch, " with ", single.layers.size(), " layers for ", layers.size());
  FATHOM_CHECK(row >= 0 && row < batch, "decoding state: row ", row, " outside the batch of ", batch);
  FATHOM_CHECK(single.lengths[0] <= capacity, "decoding state: a sequence of ", single.lengths[0],
               " positions exceeds the capacity of ", capacity);
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->copy_sequence(row, *single.layers[i]);
  lengths[size_t(row)] = single.lengths[0];
  Tensor count = device_lengths.narrow(row, 1);  // the row's count only: one small copy per prompt taken
  count.copy_from(single.device_lengths);
}

DecodeState Decoder::start_decoding(int64_t batch, int64_t capacity, DType dtype, Device device) const {
  FATHOM_CHECK(batch >= 1 && capacity >= 1, "decoding needs batch and capacity >= 1, got ", batch, " and ", capacity);
  FATHOM_CHECK(capacity < (int64_t(1) << 31), "decoding: a capacity of ", capacity,
               " positions exceeds the I32 positions' 2^31 - 1");
  DecodeState state;
  state.batch = batch;
  state.capacity = capacity;
  state.lengths.assign(size_t(batch), 0);
  for (const auto& block : model_.layers) state.layers.push_back(block->make_cache(batch, capacity, dtype, device));
  state.device_lengths = Tensor::zeros({batch}, DType::i32, device);
  return state;
}

Variable Decoder::decode(const Tensor& ids, DecodeState& state) const {
  FATHOM_CHECK(ids.rank() == 2 && ids.dim(0) == state.batch && ids.dim(1) >= 1, "decode: ids must be [", state.batch,
               ", Tq >= 1] for this state, got ", describe(ids));
  const int64_t T = ids.dim(1);
  state.check_room_for(T);
  FATHOM_CHECK(state.device_lengths.device() == ids.device(), "decode: ids ", describe(ids),
               " are not on the decoding state's device ", state.device_lengths.device().str());
  // Each sequence's positions come from its count on the state's device (a replayed step finds its
  // own there): [T] for one sequence, [B, T] for more.
  const Tensor positions = positions_after(state.device_lengths, T);
  LayerStream h{.x = model_.embed_tokens.forward(ids)};
  // MoDA: the depth slots of this step's tokens; no earlier token's are read again.
  const std::shared_ptr<DepthStream> depth = new_depth_stream(ids);
  const int64_t L = int64_t(model_.layers.size());
  const auto rope_angles = std::make_shared<RopeAngleCache>();  // one table for every layer's step
  for (int64_t i = 0; i < L; ++i) {
    MixerInputs inputs{positions, depth.get(), i + 1 < L};
    inputs.rope_angles = rope_angles;
    inputs.cache = state.layers[size_t(i)].get();
    inputs.device_past = &state.device_lengths;
    h = model_.layers[size_t(i)]->forward_stream(h, inputs, LayerReport());
  }
  for (int64_t& n : state.lengths) n += T;
  advance_positions(state.device_lengths, T);
  // A pre-norm stream handed on untaken: its last add inside the final norm's launch, one launch a step fewer.
  return h.take_normed(model_.norm).second;
}

std::vector<LayerCost> Decoder::layer_costs(int64_t seq_len) const {
  std::vector<LayerCost> costs;
  int64_t written = 0;
  for (const auto& block : model_.layers) {
    costs.push_back(block->cost(CostQuery{seq_len, written}));
    written += block->depth_slots_written();
  }
  return costs;
}

void Decoder::set_recompute(Recompute recompute) {
  recompute_ = recompute;
  for (const auto& layer : model_.layers) layer->set_recompute(recompute == Recompute::block);
}

std::vector<std::pair<std::string, Shape>> decoder_parameter_shapes(const ModelConfig& config) {
  // A Decoder's parameters are unwritten host allocations until an arena fills them, so building
  // one only to list its names costs address space, not memory.
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const Parameter& p : Decoder(config).parameters()) shapes.emplace_back(p.name, p.var.shape());
  return shapes;
}

int64_t parameter_count(const ModelConfig& config) {
  int64_t count = 0;
  for (const auto& [name, shape] : decoder_parameter_shapes(config)) count += shape.numel();
  return count;
}

// Every block but the last writes its slots: the last block's would have no reader.
int64_t Decoder::depth_slots() const {
  if (!config_.options.get<MoDAConfig>().enabled()) return 0;
  int64_t slots = 0;
  for (size_t i = 0; i + 1 < model_.layers.size(); ++i) slots += model_.layers[i]->depth_slots_written();
  // One block still gets a stream to read (none), so the buffers are never empty.
  return std::max<int64_t>(slots, model_.layers.front()->depth_slots_written());
}

// The GPU's MoDA kernels read bf16 depth KV; the CPU reference computes in f32.
DType Decoder::depth_dtype(Device device) { return device.is_cuda() ? DType::bf16 : DType::f32; }

size_t Decoder::depth_cache_bytes(int64_t batch, int64_t seq_len, Device device) const {
  if (!config_.options.get<MoDAConfig>().enabled()) return 0;
  return 2 * size_t(batch * seq_len * depth_slots() * config_.n_kv_heads * config_.head_dim()) *
         dtype_size(depth_dtype(device));
}

}  // namespace fathom
