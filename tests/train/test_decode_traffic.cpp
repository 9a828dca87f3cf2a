// What a decoding step reads (train/measure/decode_traffic.h), checked against sizes counted another way:
// the weights a HF checkpoint stores, the caches Decoder::start_decoding allocates, the constant states
// decode_memory measures, the depth buffer Decoder::depth_cache_bytes sizes.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/decoder.h"
#include "layers/dsla_config.h"
#include "layers/hf_import.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/test_support.h"
#include "train/generate/generator.h"
#include "train/measure/decode_traffic.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

const std::string kFixtures = std::string(FATHOM_SOURCE_DIR) + "/tests/fixtures/hf/";

ModelConfig small() { return fathom::testing::byte_vocab_model("pre", /*qk_norm=*/false, /*n_layers=*/4); }

// Bytes of every stored tensor, in `dtype`, and of the embedding table alone.
struct StoredBytes {
  size_t all = 0, embedding = 0, embedding_row = 0;
};
StoredBytes stored_bytes(const HfModel& hf, DType dtype) {
  StoredBytes s;
  for (const auto& [name, tensor] : hf.weights) {
    const size_t bytes = size_t(tensor.numel()) * dtype_size(dtype);
    s.all += bytes;
    if (name == "model.embed_tokens.weight") {
      s.embedding = bytes;
      s.embedding_row = size_t(tensor.dim(1)) * dtype_size(dtype);
    }
  }
  return s;
}

// What start_decoding allocates for `batch` sequences of exactly `positions` positions.
size_t allocated_cache_bytes(const ModelConfig& config, int64_t batch, int64_t positions, DType dtype) {
  return Decoder(config).start_decoding(batch, positions, dtype, Device::cpu()).bytes();
}

}  // namespace

TEST(DecodeTraffic, TiedLlamaReadsItsWeightsOnceTheTableForTheHeadAndBRowsForTheInput) {
  // Tied: the stored table is both the input embedding (B rows read) and the head (read whole).
  const HfModel hf = load_hf_model(kFixtures + "llama_tied");
  ASSERT_TRUE(hf.config.tie_embeddings);
  const int64_t B = 3, P = 50;
  const DecodeTraffic t = decode_step_traffic(hf.config, DType::bf16, DType::bf16, DType::bf16, B, P);
  const StoredBytes s = stored_bytes(hf, DType::bf16);
  EXPECT_EQ(t.weights, s.all);
  EXPECT_EQ(t.embedding_rows, size_t(B) * s.embedding_row);
  EXPECT_EQ(t.kv_cache, allocated_cache_bytes(hf.config, B, P, DType::bf16));
  EXPECT_EQ(t.states, 0u);
  EXPECT_EQ(t.depth_kv, 0u);
  EXPECT_EQ(t.total(), t.weights + t.embedding_rows + t.kv_cache);
}

TEST(DecodeTraffic, UntiedOlmo2ReadsItsHeadWholeAndOnlyBRowsOfTheTable) {
  const HfModel hf = load_hf_model(kFixtures + "olmo2");
  ASSERT_FALSE(hf.config.tie_embeddings);
  const int64_t B = 2, P = 7;
  const DecodeTraffic t = decode_step_traffic(hf.config, DType::f32, DType::f32, DType::f32, B, P);
  const StoredBytes s = stored_bytes(hf, DType::f32);
  EXPECT_EQ(t.weights, s.all - s.embedding);
  EXPECT_EQ(t.embedding_rows, size_t(B) * s.embedding_row);
  EXPECT_EQ(t.kv_cache, allocated_cache_bytes(hf.config, B, P, DType::f32));
  // The cache grows with the positions; the weights do not.
  const DecodeTraffic longer = decode_step_traffic(hf.config, DType::f32, DType::f32, DType::f32, B, 2 * P);
  EXPECT_EQ(longer.kv_cache, 2 * t.kv_cache);
  EXPECT_EQ(longer.weights, t.weights);
}

TEST(DecodeTraffic, DslaLayersReadTheirConstantStateInsteadOfACache) {
  for (int64_t states : {1, 2}) {
    ModelConfig c = small();
    c.layers = {"attention", "dsla"};
    c.options.get<DslaConfig>().states = states;
    const int64_t B = 3, P = 11;
    const DecodeMemory memory = decode_memory(Decoder(c), DType::bf16);
    ASSERT_EQ(memory.state_layers, 2);
    const DecodeTraffic t = decode_step_traffic(c, DType::bf16, DType::bf16, DType::bf16, B, P);
    EXPECT_EQ(t.states, size_t(B) * memory.state_bytes) << states << " states";
    EXPECT_EQ(t.kv_cache, size_t(B * P) * memory.bytes_per_position) << states << " states";
    // The constant states are what start_decoding allocates besides the two attention layers' caches.
    EXPECT_EQ(t.states + t.kv_cache, allocated_cache_bytes(c, B, P, DType::bf16));
  }
}

TEST(DecodeTraffic, ModRoutedLayersHoldTheirCapacityShareOfThePositions) {
  ModelConfig c = small();
  c.options.get<ModConfig>() = {.capacity = 0.25, .every = 2};  // layers 1 and 3 routed
  const int64_t B = 2, P = 10;
  const DecodeState state = Decoder(c).start_decoding(B, P, DType::bf16, Device::cpu());
  // Every layer's cache as allocated, whole for the dense layers 0 and 2, ceil(0.25 * 10) = 3 of 10 positions
  // for the routed layers 1 and 3.
  size_t expected = 0;
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const size_t per_position = state.layers[i]->bytes_per_position();
    expected += per_position * (i % 2 == 1 ? 3 : size_t(P));
  }
  const DecodeTraffic t = decode_step_traffic(c, DType::bf16, DType::bf16, DType::bf16, B, P);
  EXPECT_EQ(t.kv_cache, expected);
  // The routed blocks' routers and predictors are weights the step reads.
  const DecodeTraffic dense = decode_step_traffic(small(), DType::bf16, DType::bf16, DType::bf16, B, P);
  EXPECT_GT(t.weights, dense.weights);
  EXPECT_EQ(t.weights + t.embedding_rows, size_t(parameter_count(c)) * 2 - 257 * 24 * 2 + B * 24 * 2);
}

TEST(DecodeTraffic, ModaLayersReadTheStepsDepthSlotsOfTheBlocksBeforeThem) {
  // 4 blocks of one slot each: layer i reads the i slots written before it (0 + 1 + 2 + 3 = 6), or with
  // max_slots 2 at most the 2 most recent (0 + 1 + 2 + 2 = 5).
  for (const auto& [max_slots, slots_read] : {std::pair<int64_t, size_t>{0, 6}, {2, 5}}) {
    ModelConfig c = small();
    c.qk_norm = true;
    c.options.get<MoDAConfig>() = {.variant = MoDAVariant::attn_kv, .max_slots = max_slots};
    const Decoder model(c);
    const int64_t B = 3, P = 5;
    // The step's depth buffer: every slot written, for one token per sequence.
    const size_t per_slot = model.depth_cache_bytes(B, 1, Device::cpu()) / size_t(model.depth_slots());
    const DecodeTraffic t = decode_step_traffic(c, DType::bf16, DType::bf16, Decoder::depth_dtype(Device::cpu()), B, P);
    EXPECT_EQ(t.depth_kv, slots_read * per_slot) << "max_slots " << max_slots;
    // The sequence caches are the baseline's.
    EXPECT_EQ(t.kv_cache, allocated_cache_bytes(c, B, P, DType::bf16));
  }
}

TEST(DecodeTraffic, RefusesAnEmptyBatchOrNoPositions) {
  expect_error([] { decode_step_traffic(small(), DType::bf16, DType::bf16, DType::bf16, 0, 4); },
               {"batch and positions must be >= 1, got 0 and 4"});
  expect_error([] { decode_step_traffic(small(), DType::bf16, DType::bf16, DType::bf16, 2, 0); },
               {"batch and positions must be >= 1, got 2 and 0"});
}
