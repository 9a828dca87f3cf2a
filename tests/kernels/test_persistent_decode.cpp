// The persistent decoding kernel's host checks (kernels/decode_step/persistent_decode.h): a model it cannot
// decode gets a reason naming the problem, the kernel refuses to be built for it, and the decoding step that
// would use it (train/generate/persistent_step.h) is not made for a host state, MoDA, MoD, FP8 linears or two
// sequences, and says why; a one-split tile count below 1 is refused. Its GPU tests are in
// tests/train/test_gpu_persistent_decode.cpp.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "kernels/decode_step/persistent_decode.h"
#include "layers/linear.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"
#include "layers/parameter_arena.h"
#include "tests/support/kernel_choice_scope.h"
#include "train/generate/persistent_step.h"

using namespace fathom;

namespace {

// Two layers that fit the kernel's shapes: d_model 512, 8 heads of 64 over 4 KV heads, FFN 1024, a 16-position
// cache, on the host.
PersistentDecodeModel fitting_shapes() {
  const auto bf16 = [](Shape s) { return Tensor::zeros(s, DType::bf16); };
  PersistentDecodeModel m;
  m.heads = 8, m.kv_heads = 4, m.head_dim = 64, m.scale = 0.125;
  for (int l = 0; l < 2; ++l)
    m.layers.push_back({.q = bf16({512, 512}),
                        .k = bf16({256, 512}),
                        .v = bf16({256, 512}),
                        .o = bf16({512, 512}),
                        .gate = bf16({1024, 512}),
                        .up = bf16({1024, 512}),
                        .down = bf16({512, 1024}),
                        .q_norm = bf16({512}),
                        .k_norm = bf16({256}),
                        .attn_norm = bf16({512}),
                        .ffn_norm = bf16({512}),
                        .cache_k = bf16({1, 4, 16, 64}),
                        .cache_v = bf16({1, 4, 16, 64})});
  m.final_norm = bf16({512});
  m.head = bf16({1000, 512});
  return m;
}

void expect_unfit(const PersistentDecodeModel& m, const std::string& names) {
  const std::string why = persistent_decode_unfit(m);
  EXPECT_NE(why.find(names), std::string::npos) << "'" << why << "' does not name '" << names << "'";
}

}  // namespace

TEST(PersistentDecode, AModelItCannotDecodeGetsAReasonNamingTheProblem) {
  expect_unfit(fitting_shapes(), "not a GPU");  // every shape fits; the device does not
  PersistentDecodeModel m = fitting_shapes();
  m.head_dim = 96;
  expect_unfit(m, "head dim 96");
  m = fitting_shapes();
  m.kv_heads = 1;
  expect_unfit(m, "8 query heads over 1 KV heads");
  m = fitting_shapes();
  m.layers[1].k = Tensor::zeros({256, 448}, DType::bf16);
  expect_unfit(m, "layer 1's k");
  m = fitting_shapes();
  m.layers[0].gate = Tensor::zeros({1000, 512}, DType::bf16);
  expect_unfit(m, "ffn_hidden 1000");
  m = fitting_shapes();
  m.layers[1].q_norm = Tensor();
  expect_unfit(m, "layer 1's QK-norm differs");
  m = fitting_shapes();
  m.layers[0].cache_v = Tensor::zeros({1, 4, 16, 64}, DType::f32);
  expect_unfit(m, "layer 0's cache_v");
  m = fitting_shapes();
  m.layers[1].up = Tensor::zeros({1024 * 512 + 1}, DType::bf16).narrow(1, 1024 * 512).view({1024, 512});
  expect_unfit(m, "layer 1's up");  // one element past the storage's start: not on 16 bytes
  m = fitting_shapes();
  m.layers[1].cache_k = m.layers[1].cache_v = Tensor::zeros({1, 4, 32, 64}, DType::bf16);
  expect_unfit(m, "layer 1's cache_k");  // every layer's cache holds layer 0's number of positions
  m = fitting_shapes();
  m.layers.clear();
  expect_unfit(m, "no layers");
  try {
    PersistentDecode kernel(fitting_shapes());
    ADD_FAILURE() << "the kernel was built for host tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("persistent decode"), std::string::npos) << e.what();
  }
}

TEST(PersistentDecode, ADecoderItCannotTakeGetsNoStepAndAReason) {
  test::PersistentDecodeScope on(Toggle::on);
  const ModelConfig plain{
      .d_model = 512, .n_layers = 2, .n_heads = 8, .n_kv_heads = 8, .ffn_hidden = 512, .vocab_size = 64};
  ModelConfig moda = plain, mod = plain;
  moda.options.get<MoDAConfig>() = {.variant = MoDAVariant::attn_kv};
  mod.options.get<ModConfig>() = {.capacity = 0.5, .every = 2};
  const std::pair<ModelConfig, std::string> cases[] = {
      {plain, "GPU decoding"}, {moda, "MoDA"}, {mod, "MoD"}, {plain, "FP8"}, {plain, "2 sequences"}};
  int64_t batch = 1;
  for (const auto& [config, why] : cases) {
    Decoder model(config);
    ParameterArena arena(model, Device::cpu());
    arena.initialise(3);
    NoGrad no_grad;
    if (why == "FP8") use_fp8_linears(model);  // the kernel would read the BF16 weights instead
    if (why == "2 sequences") batch = 2;
    DecodeState state = model.start_decoding(batch, 4, DType::f32, Device::cpu());
    std::string reason;
    EXPECT_FALSE(PersistentStep::make(model, state, &reason)) << why;
    EXPECT_NE(reason.find(why), std::string::npos) << "'" << reason << "' does not name '" << why << "'";
  }
}

TEST(PersistentDecode, OneSplitTilesBelowOneIsRefused) {
  test::PersistentOneSplitTilesScope one(1);
  EXPECT_EQ(persistent_one_split_tiles(), 1);
  EXPECT_THROW(set_persistent_one_split_tiles(0), Error);
  EXPECT_EQ(persistent_one_split_tiles(), 1);
}
