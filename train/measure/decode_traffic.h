// What one decoding step must read from memory: the bytes that bound its speed from below on a
// bandwidth-limited device (the generation benchmark's "% of roofline", bench/bench_generate.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "layers/model_config.h"

namespace fathom {

// One step of `batch` sequences, one new token each, whose layers hold `positions` positions.
// Reads only: the writes (one K/V position per layer, a state update, B rows of logits) and every
// activation are left out, as are the fp32 master weights, which a step never touches.
struct DecodeTraffic {
  // Every weight the step multiplies, whole, in the dtype it is stored in for inference: every block's
  // projections, norms and routers, the final norm, and the LM head's [vocab, d] (the embedding table
  // when tied). Not the input embedding table, of which a step reads only:
  size_t weights = 0;
  size_t embedding_rows = 0;  // the batch's rows of the input embedding table
  // The KV caches over `positions` (attention layers). A MoD-routed layer holds only the positions routed
  // through it: approximated by its capacity, mod.capacity * positions.
  size_t kv_cache = 0;
  size_t states = 0;    // constant states (dsla layers: fp32, whatever the length)
  size_t depth_kv = 0;  // MoDA: the step's depth slots each attention layer reads besides its cache
  size_t total() const { return weights + embedding_rows + kv_cache + states + depth_kv; }
};

// The step's reads for `config`, weights in `weight_dtype` (BF16 for a GPU's compute copy, F32 on the CPU),
// caches in `cache_dtype` (the activations'), MoDA depth slots in `depth_dtype` (Decoder::depth_dtype).
// Throws for batch < 1, positions < 1, or a layer kind it has no model for (so a new kind is counted
// when it is added, not silently left out).
DecodeTraffic decode_step_traffic(const ModelConfig& config, DType weight_dtype, DType cache_dtype, DType depth_dtype,
                                  int64_t batch, int64_t positions);

}  // namespace fathom
