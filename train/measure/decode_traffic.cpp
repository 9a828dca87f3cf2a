#include "train/measure/decode_traffic.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "layers/attention.h"
#include "layers/decoder.h"
#include "layers/dsla.h"
#include "layers/dsla_config.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"

namespace fathom {

DecodeTraffic decode_step_traffic(const ModelConfig& config, DType weight_dtype, DType cache_dtype, DType depth_dtype,
                                  int64_t batch, int64_t positions) {
  FATHOM_CHECK(batch >= 1 && positions >= 1, "decode_step_traffic: batch and positions must be >= 1, got ", batch,
               " and ", positions);
  DecodeTraffic t;
  const size_t B = size_t(batch), weight_size = dtype_size(weight_dtype);
  for (const auto& [name, shape] : decoder_parameter_shapes(config)) {
    const size_t bytes = size_t(shape.numel()) * weight_size;
    if (name != "model.embed_tokens.weight") {
      t.weights += bytes;
      continue;
    }
    t.embedding_rows = B * size_t(shape[1]) * weight_size;
    if (config.tie_embeddings) t.weights += bytes;  // the head multiplies the whole table
  }

  const size_t kv_heads = size_t(config.n_kv_heads), head_dim = size_t(config.head_dim());
  const size_t kv_per_position = 2 * kv_heads * head_dim * dtype_size(cache_dtype);
  const ModConfig& mod = config.options.get<ModConfig>();
  const MoDAConfig& moda = config.options.get<MoDAConfig>();
  for (int64_t layer = 0; layer < config.n_layers; ++layer) {
    const std::string& kind = config.layer_kind(layer);
    if (kind == kAttentionKind) {
      const double held = mod.routes(layer) ? std::ceil(mod.capacity * double(positions)) : double(positions);
      t.kv_cache += B * size_t(held) * kv_per_position;
      // Every block before this one wrote its slots for the step's token; this one reads the window of them.
      const int64_t written = layer * moda.slots_per_block();
      const int64_t read = written - moda_first_read_slot(written, moda.max_slots);
      t.depth_kv += B * size_t(read) * 2 * kv_heads * head_dim * dtype_size(depth_dtype);
    } else if (kind == kDslaKind) {
      const size_t states = size_t(config.options.get<DslaConfig>().states);
      t.states += B * states * size_t(config.n_heads) * head_dim * head_dim * dtype_size(DType::f32);
    } else {
      FATHOM_FAIL("decode_step_traffic: no model of what a decoding step of a '", kind, "' layer (layer ", layer,
                  ") reads; add one in train/measure/decode_traffic.cpp");
    }
  }
  return t;
}

}  // namespace fathom
