// fathom distill end to end on the CPU: a tiny teacher, both of its layers converted in turn. The
// trained M_1 is closer to the teacher than the untrained conversion, layer_align alone lowers the
// aligned layer's MSE, the frozen parameters stay bit for bit the teacher's, only the converted
// layer has optimizer state, and a stopped chain resumes to the uninterrupted chain's weights.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "autograd/divergences.h"
#include "autograd/grad_mode.h"
#include "core/safetensors.h"
#include "data/loader.h"
#include "distill_test_helpers.h"
#include "layers/dsla.h"
#include "layers/parameter_arena.h"
#include "train/checkpoint/checkpoint.h"
#include "train/distill/distill_chain.h"
#include "train/distill/distill_init.h"
#include "train/distill/distill_order.h"
#include "train/distill/distill_teacher.h"
#include "train/run/run_data.h"
#include "train/run/stop_signal.h"

using namespace fathom;
namespace fs = std::filesystem;
using fathom::testing::distill_yaml;
using fathom::testing::ScratchFolder;
using fathom::testing::tiny_teacher;
using fathom::testing::weights_of;

namespace {

DistillOptions quiet(int64_t max_steps = 0, bool resume = false) {
  DistillOptions o;
  o.quiet = true;
  o.max_steps = max_steps;
  o.resume = resume;
  return o;
}

std::string text_of(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool in_layer_mixer(const std::string& name, int64_t layer) {
  return name.starts_with("model.layers." + std::to_string(layer) + ".self_attn.");
}

}  // namespace

TEST(Distill, ChainConvertsBothLayersTrainsOnlyEachAndBeatsTheUntrainedConversion) {
  ScratchFolder dir;
  const Recipe recipe = parse_recipe(
      distill_yaml(dir / "chain", "order: sensitivity, layers: 2, loss: {ce: 1, logit_kl: 1, layer_align: 1}", 40),
      "distill.yaml");
  const DistillResult r = run_distillation(recipe, quiet());
  ASSERT_FALSE(r.stopped);
  ASSERT_EQ(r.order.size(), 2u);
  ASSERT_EQ(r.models.size(), 2u);
  EXPECT_EQ(r.steps_done, 80);

  // The order's table: both layers with their untrained-conversion loss, lowest first.
  const std::string order = text_of(dir / "chain" / "order.json");
  EXPECT_NE(order.find("\"order\": \"sensitivity\""), std::string::npos) << order;
  EXPECT_TRUE(fs::exists(dir / "chain" / "order.md"));
  // The untrained conversion of the first layer, as the ranking measured it.
  const Teacher teacher("checkpoint:" + tiny_teacher().string(), Device::cpu(), false);
  const RunData data = open_run_data(recipe, DataUse::training);
  const DistillRanking ranking = rank_layers(recipe, distill_plan(recipe), teacher, data);
  ASSERT_EQ(ranking.ranked[0].layer, r.order[0]);
  EXPECT_LE(ranking.ranked[0].score, ranking.ranked[1].score);
  const double teacher_loss = r.teacher.validation.at("moby_dick").loss;
  const double untrained = ranking.ranked[0].score, trained = r.models[0].measures.validation.at("moby_dick").loss;
  EXPECT_LT(std::abs(trained - teacher_loss), std::abs(untrained - teacher_loss))
      << "teacher " << teacher_loss << ", untrained conversion " << untrained << ", M_1 " << trained;

  // Frozen parameters bit for bit: M_1 is the teacher except layer pi_1's mixer, M_2 is M_1 except pi_2's.
  const auto t = weights_of(tiny_teacher()), m1 = weights_of(dir / "chain" / "M_1"),
             m2 = weights_of(dir / "chain" / "M_2");
  int64_t trained_tensors = 0;
  for (const auto& [name, values] : m1) {
    if (in_layer_mixer(name, r.order[0])) {
      ++trained_tensors;
      continue;
    }
    ASSERT_TRUE(t.count(name)) << name;
    EXPECT_EQ(values, t.at(name)) << name << " changed in M_1";
  }
  EXPECT_GT(trained_tensors, 4);  // q, k, v, o, the gates and gamma
  EXPECT_NE(m1.at("model.layers." + std::to_string(r.order[0]) + ".self_attn.q_proj.weight"),
            t.at("model.layers." + std::to_string(r.order[0]) + ".self_attn.q_proj.weight"));
  for (const auto& [name, values] : m2) {
    if (!in_layer_mixer(name, r.order[1])) {
      EXPECT_EQ(values, m1.at(name)) << name << " changed in M_2";
    }
  }
  // Optimizer state only for the converted layer.
  int64_t moments = 0;
  for (const auto& [name, value] : load_checkpoint(dir / "chain" / "M_2").optimizer)
    if (name.starts_with("exp_avg") && ++moments) {
      EXPECT_NE(name.find("model.layers." + std::to_string(r.order[1]) + ".self_attn."), std::string::npos) << name;
    }
  EXPECT_GT(moments, 0);

  // M_k is an ordinary checkpoint whose recipe has the dsla layers and no distill section.
  const Recipe saved = parse_saved_recipe(text_of(dir / "chain" / "M_2" / "recipe.yaml"), "M_2 recipe");
  EXPECT_EQ(saved.model.layers, (std::vector<std::string>{"dsla", "dsla"}));
  EXPECT_TRUE(saved.distill.teacher.empty());

  // The table: both models, per domain against the teacher, KV bytes saved (k/L of the teacher's).
  const std::string table = text_of(dir / "chain" / "distill.json");
  EXPECT_NE(table.find("\"k\": 2"), std::string::npos) << table;
  EXPECT_NE(table.find("teacher_loss"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "chain" / "distill.md"));
  EXPECT_NEAR(r.teacher.kv_bytes_per_1k_tokens - r.models[0].measures.kv_bytes_per_1k_tokens,
              r.teacher.kv_bytes_per_1k_tokens / 2, 1.0);
  EXPECT_EQ(r.models[1].measures.kv_bytes_per_1k_tokens, 0.0);
  EXPECT_GT(r.models[0].measures.decode_tokens_per_second, 0.0);
}

TEST(Distill, LayerAlignAloneLowersTheAlignedLayersMse) {
  ScratchFolder dir;
  const Recipe recipe =
      parse_recipe(distill_yaml(dir / "align", "order: [1], loss: {layer_align: 1}", 40), "distill.yaml");
  const DistillResult r = run_distillation(recipe, quiet());
  ASSERT_EQ(r.models.size(), 1u);
  const Teacher teacher("checkpoint:" + tiny_teacher().string(), Device::cpu(), false);
  const Recipe m1 = converted_layer_recipe(recipe, {1}, dir / "unused");

  // The same validation batch through the converted model before (teacher-initialised) and after.
  const RunData data = open_run_data(recipe, DataUse::training);
  TokenLoader loader(data.validation.front().second, 4, 32, 7);
  const Tensor ids = loader.next_batch().inputs;
  const Tensor target = teacher.targets(ids, false, 1).layer_output;
  auto mse_of = [&](const TensorMap& weights) {
    Decoder model(m1.model);
    ParameterArena arena(model, Device::cpu());
    arena.initialise(m1.train.seed);
    TensorMap all;
    for (const auto& [name, value] : arena.named_values()) all.emplace_back(name, value.clone());
    overlay_weights(all, weights, "weights");
    arena.load(all, "weights");
    NoGrad no_grad;
    ForwardOptions options;
    options.layer_outputs = true;
    return mse_to_target(model.forward(ids, options).layer_outputs[1], target).value().item();
  };
  const double before = mse_of(teacher.files().weights);
  const double after = mse_of(load_checkpoint(dir / "align" / "M_1", CheckpointUse::model_only).model);
  EXPECT_LT(after, 0.8 * before) << "before " << before << ", after " << after;
}

TEST(Distill, StoppedChainResumesToTheUninterruptedWeights) {
  ScratchFolder dir;
  const std::string section = "order: entropy, layers: 2, loss: {ce: 1, layer_align: 1, gate_cos: 0.1}";
  const Recipe whole = parse_recipe(distill_yaml(dir / "whole", section, 10), "distill.yaml");
  run_distillation(whole, quiet());
  const Recipe parts = parse_recipe(distill_yaml(dir / "parts", section, 10), "distill.yaml");
  // Stopped in layer 1 between checkpoints, then in layer 2, then to the end.
  const DistillResult first = run_distillation(parts, quiet(7));
  EXPECT_TRUE(first.stopped);
  EXPECT_FALSE(fs::exists(dir / "parts" / "M_2"));
  // A resumed chain is the one that started: a changed loss is refused, naming the key.
  const Recipe changed = parse_recipe(
      distill_yaml(dir / "parts", "order: entropy, layers: 2, loss: {ce: 1, layer_align: 2, gate_cos: 0.1}", 10),
      "distill.yaml");
  fathom::testing::expect_error([&] { run_distillation(changed, quiet(0, true)); }, {"distill.loss"});
  const DistillResult second = run_distillation(parts, quiet(6, true));
  EXPECT_TRUE(second.stopped);
  EXPECT_EQ(second.models.size(), 1u);
  const DistillResult third = run_distillation(parts, quiet(0, true));
  EXPECT_FALSE(third.stopped);
  EXPECT_EQ(third.steps_done, 7);
  // Measured once each: the teacher by the first invocation, M_1 by the second (where it finished);
  // the third reads both back from their records, bit for bit, and measures only M_2.
  EXPECT_TRUE(first.teacher_measured);
  EXPECT_FALSE(second.teacher_measured);
  EXPECT_FALSE(third.teacher_measured);
  EXPECT_EQ(second.models_measured, 1);
  EXPECT_EQ(third.models_measured, 1);
  ASSERT_EQ(third.models.size(), 2u);
  const EvalResult& recorded = third.models[0].measures.validation.at("moby_dick");
  const EvalResult& measured = second.models[0].measures.validation.at("moby_dick");
  EXPECT_EQ(recorded.loss, measured.loss);
  EXPECT_EQ(recorded.perplexity, measured.perplexity);
  EXPECT_EQ(recorded.tokens, measured.tokens);
  EXPECT_EQ(third.models[0].measures.decode_tokens_per_second, second.models[0].measures.decode_tokens_per_second);
  EXPECT_EQ(third.teacher.validation.at("moby_dick").loss, first.teacher.validation.at("moby_dick").loss);
  // A resume of the finished chain trains and measures nothing, and writes the same table.
  const std::string table = text_of(dir / "parts" / "distill.json");
  const DistillResult again = run_distillation(parts, quiet(0, true));
  EXPECT_EQ(again.steps_done, 0);
  EXPECT_EQ(again.models_measured, 0);
  EXPECT_EQ(text_of(dir / "parts" / "distill.json"), table);
  for (int k = 1; k <= 2; ++k)
    EXPECT_EQ(weights_of(dir / "parts" / ("M_" + std::to_string(k))),
              weights_of(dir / "whole" / ("M_" + std::to_string(k))))
        << "M_" << k;
  // A budget that ends with a layer stops before the next one trains a step.
  const Recipe edge = parse_recipe(distill_yaml(dir / "edge", section, 10), "distill.yaml");
  const DistillResult at_boundary = run_distillation(edge, quiet(10));
  EXPECT_TRUE(at_boundary.stopped);
  EXPECT_EQ(at_boundary.steps_done, 10);
  EXPECT_EQ(at_boundary.models.size(), 1u);
  EXPECT_FALSE(latest_checkpoint(dir / "edge" / "M_2").has_value());
  const DistillResult edge_resumed = run_distillation(edge, quiet(0, true));
  EXPECT_EQ(edge_resumed.steps_done, 10);
  EXPECT_EQ(edge_resumed.models_measured, 1);  // M_2 only: M_1 finished and was measured before the stop
  EXPECT_EQ(weights_of(dir / "edge" / "M_2"), weights_of(dir / "whole" / "M_2"));
  // The entropy order is the same each time, and its table has a score per layer.
  EXPECT_EQ(text_of(dir / "parts" / "order.json"), text_of(dir / "whole" / "order.json"));
  EXPECT_NE(text_of(dir / "whole" / "order.json").find("\"score\""), std::string::npos);
  // A finished folder is no new run's, and --resume needs a started one.
  fathom::testing::expect_error([&] { run_distillation(parts, quiet()); }, {"exists", "--resume"});
  const Recipe fresh = parse_recipe(distill_yaml(dir / "none", section, 10), "distill.yaml");
  fathom::testing::expect_error([&] { run_distillation(fresh, quiet(0, true)); }, {"no distillation to continue"});
}

// A stop request (as SIGINT or SIGTERM would) stops the chain after its first step with that step's
// checkpoint, as it stops `fathom train`; --resume ends with the uninterrupted chain's weights.
TEST(Distill, StopRequestCheckpointsTheStepAndResumeEqualsTheUninterruptedChain) {
  ScratchFolder dir;
  const std::string section = "order: [1, 0], loss: {ce: 1, layer_align: 1}";
  run_distillation(parse_recipe(distill_yaml(dir / "whole", section, 6), "distill.yaml"), quiet());
  const Recipe parts = parse_recipe(distill_yaml(dir / "parts", section, 6), "distill.yaml");
  request_stop();
  const DistillResult stopped = run_distillation(parts, quiet());
  clear_stop_request();
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.steps_done, 1);
  ASSERT_TRUE(latest_checkpoint(dir / "parts" / "M_1").has_value());
  EXPECT_EQ(latest_checkpoint(dir / "parts" / "M_1")->filename(), "step_00000001");
  EXPECT_FALSE(fs::exists(dir / "parts" / "M_2"));
  const DistillResult resumed = run_distillation(parts, quiet(0, true));
  EXPECT_FALSE(resumed.stopped);
  EXPECT_EQ(resumed.steps_done, 11);
  for (int k = 1; k <= 2; ++k)
    EXPECT_EQ(weights_of(dir / "parts" / ("M_" + std::to_string(k))),
              weights_of(dir / "whole" / ("M_" + std::to_string(k))))
        << "M_" << k;
}

TEST(Distill, AnUnnamedModelsCheckpointsGoOnceTheNextHasFinished) {
  ScratchFolder dir;
  // layers: [1.0] names M_2 only; M_1 is intermediate.
  const std::string section = "order: entropy, layers: [1.0], loss: {ce: 1, layer_align: 1}";
  const Recipe whole = parse_recipe(distill_yaml(dir / "whole", section, 6), "distill.yaml");
  const DistillResult uninterrupted = run_distillation(whole, quiet());
  ASSERT_EQ(uninterrupted.models.size(), 2u);
  EXPECT_FALSE(uninterrupted.models[0].named);
  EXPECT_TRUE(uninterrupted.models[0].checkpoint.empty());
  EXPECT_TRUE(list_checkpoints(dir / "whole" / "M_1").empty());
  EXPECT_TRUE(fs::exists(dir / "whole" / "M_1" / "measures.json"));
  EXPECT_TRUE(latest_checkpoint(dir / "whole" / "M_2").has_value());
  const std::string json = text_of(dir / "whole" / "distill.json");
  EXPECT_NE(json.find("\"k\": 1, \"layers\": [" + std::to_string(uninterrupted.order[0]) +
                      "], \"fraction\": 0.500000, \"named\": false, \"checkpoint\": \"\""),
            std::string::npos)
      << json;
  EXPECT_NE(text_of(dir / "whole" / "distill.md").find("M_1 (intermediate, not kept)"), std::string::npos);

  // Stopped inside M_2: M_1 is still needed (M_2 has not finished), so it is kept.
  const Recipe parts = parse_recipe(distill_yaml(dir / "parts", section, 6), "distill.yaml");
  EXPECT_TRUE(run_distillation(parts, quiet(8)).stopped);
  EXPECT_TRUE(latest_checkpoint(dir / "parts" / "M_1").has_value());
  const DistillResult resumed = run_distillation(parts, quiet(0, true));
  EXPECT_EQ(resumed.steps_done, 4);
  EXPECT_EQ(resumed.models_measured, 1);
  EXPECT_TRUE(list_checkpoints(dir / "parts" / "M_1").empty());
  EXPECT_EQ(weights_of(dir / "parts" / "M_2"), weights_of(dir / "whole" / "M_2"));
  // The released M_1 is read back from its measures, not trained again.
  const DistillResult again = run_distillation(parts, quiet(0, true));
  EXPECT_EQ(again.steps_done, 0);
  EXPECT_EQ(again.models_measured, 0);
  ASSERT_EQ(again.models.size(), 2u);
  EXPECT_EQ(again.models[0].measures.validation.at("moby_dick").loss,
            uninterrupted.models[0].measures.validation.at("moby_dick").loss);
  EXPECT_TRUE(again.models[0].checkpoint.empty());
}

TEST(Distill, HfTeacherLoadsAndRanksItsLayers) {
  const std::string spec = "hf:" + std::string(FATHOM_SOURCE_DIR) + "/tests/fixtures/hf/llama_tied";
  const Teacher teacher(spec, Device::cpu(), false);
  EXPECT_EQ(teacher.decoder().config().n_layers, 2);
  std::vector<int32_t> ids(2 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % 97);
  const auto entropy = teacher.attention_entropy(Tensor::from_vector(ids, Shape{2, 16}));
  ASSERT_EQ(entropy.size(), 2u);
  for (const auto& e : entropy) {
    ASSERT_TRUE(e.has_value());
    EXPECT_GT(*e, 0.0);
    EXPECT_LT(*e, std::log(16.0) + 1e-9);
  }
  // The student of an HF teacher: its q, k, v, o under the same names, the gates initialised.
  Recipe recipe;
  recipe.model = teacher.decoder().config();
  recipe.distill.steps_per_layer = 1;
  const Recipe student = converted_layer_recipe(recipe, {1}, "/tmp/unused");
  Decoder model(student.model);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(1);
  TensorMap weights;
  for (const auto& [name, value] : arena.named_values()) weights.emplace_back(name, value.clone());
  overlay_weights(weights, teacher.files().weights, spec);
  arena.load(weights, spec);
  const TeacherTargets t = teacher.targets(Tensor::from_vector(ids, Shape{2, 16}), true, 0);
  NoGrad no_grad;
  ForwardOptions options;
  options.layer_outputs = true;
  // Layer 0 is still the teacher's: its output matches exactly.
  const Variable h0 = model.forward(Tensor::from_vector(ids, Shape{2, 16}), options).layer_outputs[0];
  EXPECT_EQ(mse_to_target(h0, t.layer_output).value().item(), 0.0);
}

TEST(Distill, OnlyTheTrainedLayerReportsGateCos) {
  Recipe recipe;
  recipe.model = Teacher("checkpoint:" + tiny_teacher().string(), Device::cpu(), false).decoder().config();
  recipe.distill.steps_per_layer = 1;
  const Recipe both = converted_layer_recipe(recipe, {0, 1}, "/tmp/unused");
  Decoder model(both.model);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(3);
  std::vector<int32_t> ids(2 * 8);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 13 % 264);
  NoGrad no_grad;
  for (int64_t layer : {-1, 0, 1}) {
    ForwardOptions options;
    if (layer >= 0) options.layer_taps.emplace_back(layer, kGateCosLoss);
    const ModelOutput out = model.forward(Tensor::from_vector(ids, Shape{2, 8}), options);
    int64_t reported = 0;
    for (const NamedLoss& loss : out.aux_losses) {
      if (loss.name != "gate_cos") continue;
      ++reported;
      const double cos = loss.value.value().item();
      EXPECT_TRUE(cos > -1.0 - 1e-9 && cos < 1.0 + 1e-9) << cos;
    }
    EXPECT_EQ(reported, layer < 0 ? 0 : 1) << "layer " << layer;
  }
}

// The real binary killed with SIGKILL mid-chain, then `fathom distill --resume`: the uninterrupted
// chain's weights bit for bit.
TEST(DistillCli, KillNineThenResumeGivesTheUninterruptedWeights) {
  ScratchFolder dir;
  const std::string section = "order: [1, 0], loss: {ce: 1, logit_kl: 1, layer_align: 1, gate_cos: 0.1}";
  run_distillation(parse_recipe(distill_yaml(dir / "whole", section, 300), "distill.yaml"), quiet());
  const fs::path recipe = dir / "distill.yaml";
  std::ofstream(recipe) << distill_yaml(dir / "killed", section, 300);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    freopen("/dev/null", "w", stdout);
    execl(FATHOM_BINARY, FATHOM_BINARY, "distill", recipe.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Killed once layer 1 has saved a few checkpoints (every 4 steps).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(dir / "killed" / "M_1" / "checkpoints" / "step_00000012") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the chain ended before it was killed";
  ASSERT_FALSE(fs::exists(dir / "killed" / "distill.json") &&
               text_of(dir / "killed" / "distill.json").find("\"k\": 2") != std::string::npos);
  const std::string resume = std::string(FATHOM_BINARY) + " distill " + recipe.string() + " --resume > /dev/null";
  ASSERT_EQ(std::system(resume.c_str()), 0);
  for (int k = 1; k <= 2; ++k)
    EXPECT_EQ(weights_of(dir / "killed" / ("M_" + std::to_string(k))),
              weights_of(dir / "whole" / ("M_" + std::to_string(k))))
        << "M_" << k;
}
