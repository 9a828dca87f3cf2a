// Small decoders on the GPU with bf16 compute copies, shared by the generation and decode-step tests.
#pragma once
#include <cstdint>
#include <string>

#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/norm_gains.h"

namespace fathom::test {

// Head dim 64 (the decode kernel takes 64 and 128), G = 3; the bytes tokenizer's 257 ids.
inline ModelConfig gpu_small(const std::string& norm, bool qk_norm, MoDAConfig moda = {}) {
  ModelConfig c{.d_model = 384,
                .n_layers = 3,
                .n_heads = 6,
                .n_kv_heads = 2,
                .ffn_hidden = 256,
                .vocab_size = 257,
                .norm = norm,
                .qk_norm = qk_norm};
  c.options.get<MoDAConfig>() = moda;
  return c;
}

// A model on the GPU, its weights initialised from `seed` and its norm gains away from 1 (randomise_norm_gains, so
// that a path normalising with the wrong norm shows), with the bf16 copy the layers read.
struct GpuModel {
  GpuModel(const ModelConfig& c, uint64_t seed) : model(c), arena(model, kGpu) {
    arena.enable_compute_copy(DType::bf16);
    arena.initialise(seed);
    randomise_norm_gains(model);
    arena.refresh_compute_copy();
  }
  Decoder model;
  ParameterArena arena;
};

}  // namespace fathom::test
