// A tiny OLMo2 trained 20 steps on the GPU and on the CPU from the same init and data: the loss
// curves agree within bf16 tolerance, under bf16 mixed precision (bf16 weights and activations) and
// under train.precision: fp32 (where only the flash attention kernel rounds to bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/json.h"
#include "tests/gpu/gpu_test_util.h"
#include "train/recipe.h"
#include "train/trainer.h"
#include "tests/unit/test_support.h"

using namespace fathom;

namespace {

std::vector<double> train_losses(const std::filesystem::path& run_dir, const std::string& device,
                                 const std::string& precision = "bf16") {
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";
  const Recipe recipe = parse_recipe(
      "name: gpu-vs-cpu\n"
      "model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n"
      "data: {tokenizer: bytes, train: [" + corpus + "/train/sotu_2009-2019.txt]}\n"
      "train: {device: " + device + ", precision: " + precision +
      ", batch_size: 4, seq_len: 64, steps: 20, optimizer: {lr: 3.0e-3}}\n"
      "log: {every: 1, dir: " + run_dir.string() + "}\n",
      "gpu-vs-cpu.yaml");
  TrainOptions options;
  options.quiet = true;
  run_training(recipe, options);
  std::vector<double> losses;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const YAML::Node node = parse_json(line, "metrics.jsonl");
    if (node["kind"].as<std::string>() == "train") losses.push_back(node["loss"].as<double>());
  }
  return losses;
}

}  // namespace

TEST(GpuTraining, TwentyStepsMatchTheCpuLossCurve) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::vector<double> cpu = train_losses(dir / "cpu", "cpu");
  ASSERT_EQ(cpu.size(), 20u);
  for (const std::string precision : {"bf16", "fp32"}) {
    const std::vector<double> gpu = train_losses(dir / ("gpu-" + precision), "cuda", precision);
    ASSERT_EQ(gpu.size(), 20u);
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_NEAR(gpu[i], cpu[i], 2e-2 * cpu[i]) << precision << " step " << i + 1;
      worst = std::max(worst, std::abs(gpu[i] - cpu[i]) / cpu[i]);
    }
    std::printf("%s: largest relative loss difference to the CPU over 20 steps: %.2e\n", precision.c_str(), worst);
    EXPECT_LT(gpu.back(), gpu.front() - 0.5) << precision;
  }
}
