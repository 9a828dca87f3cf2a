// The MoD comparison recipes (recipes/mod/): each trains a few steps on the CPU at a tiny width, with
// its routing metrics in metrics.jsonl; the isoFLOP recipe costs what the dense baseline costs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "layers/mod_config.h"
#include "tests/support/test_support.h"
#include "train/measure/evaluator.h"
#include "train/measure/throughput.h"
#include "train/recipe/recipe.h"
#include "train/run/trainer.h"

using namespace fathom;
namespace fs = std::filesystem;

namespace {

const std::string kRoot = FATHOM_SOURCE_DIR;
const std::string kCorpus = kRoot + "/data/corpus/quickstart";

Recipe mod_recipe(const std::string& name, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides{"data.train=[" + kCorpus + "/train/sotu_2009-2019.txt]",
                                     "data.validation={moby_dick: [" + kCorpus + "/validation/moby_dick.txt]}"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_recipe(kRoot + "/recipes/mod/" + name + ".yaml", overrides);
}

}  // namespace

TEST(ModRecipes, EachTrainsAFewStepsOnTheCpu) {
  fathom::testing::ScratchFolder dir;
  for (const char* name :
       {"mod-dense", "mod-c12-identity", "mod-c12-sigmoid", "mod-c12-isoflop", "mod-c12-random", "mod-c50"}) {
    SCOPED_TRACE(name);
    const fs::path run = dir / name;
    const Recipe recipe =
        mod_recipe(name, {"model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_hidden=64",
                          "train.device=cpu", "train.threads=2", "train.batch_size=2", "train.seq_len=32",
                          "train.steps=3", "train.schedule.warmup_steps=1", "eval.batches=1", "checkpoint.every=0",
                          "log.every=1", "log.dir=" + run.string()});
    EXPECT_EQ(recipe.name, name);
    RunOptions options;
    options.quiet = true;
    const TrainResult result = run_training(recipe, options);
    EXPECT_EQ(result.steps_done, 3);
    std::ifstream in(run / "metrics.jsonl");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const bool mod = recipe.model.options.get<ModConfig>().enabled();
    EXPECT_EQ(text.find("\"mod.L1.recall/moby_dick\"") != std::string::npos, mod) << text;
    if (mod && recipe.model.options.get<ModConfig>().router == ModRouter::learned) {
      EXPECT_NE(text.find("loss/mod_predictor"), std::string::npos) << text;
    }
    // fathom eval, routing as training does and as generation does: the same tokens counted, and the
    // routed layers' report.
    std::ostringstream topk, causal;
    run_evaluation(recipe, run.string(), topk, /*as_decoded=*/false);
    run_evaluation(recipe, run.string(), causal, /*as_decoded=*/true);
    EXPECT_EQ(topk.str().find("mod L1 |") != std::string::npos, mod) << topk.str();
    EXPECT_EQ(causal.str().find("mod L1 |") != std::string::npos, mod) << causal.str();
  }
}

TEST(ModRecipes, SiblingsDifferFromTheBaselineOnlyInRoutingAndTheIsoFlopOneCostsTheSame) {
  const Recipe dense = mod_recipe("mod-dense");
  EXPECT_FALSE(dense.model.options.get<ModConfig>().enabled());
  for (const char* name : {"mod-c12-identity", "mod-c12-sigmoid", "mod-c12-isoflop", "mod-c12-random", "mod-c50"}) {
    Recipe r = mod_recipe(name);
    EXPECT_TRUE(r.model.options.get<ModConfig>().enabled()) << name;
    EXPECT_EQ(r.model.options.get<ModConfig>().every, 2) << name;
    r.name = dense.name;
    r.log.dir = dense.log.dir;
    r.model.options.get<ModConfig>() = dense.model.options.get<ModConfig>();
    if (std::string(name) == "mod-c12-isoflop") r.model.n_layers = dense.model.n_layers;
    EXPECT_EQ(recipe_to_yaml(r), recipe_to_yaml(dense)) << name;
  }
  const double base = training_flops_per_token(dense.model, dense.train.seq_len);
  const Recipe iso = mod_recipe("mod-c12-isoflop");
  const double routed = training_flops_per_token(iso.model, iso.train.seq_len);
  EXPECT_NEAR(routed / base, 1.0, 0.03);
  EXPECT_GT(iso.model.n_layers, dense.model.n_layers);
  const Recipe same_depth = mod_recipe("mod-c12-identity");
  EXPECT_LT(training_flops_per_token(same_depth.model, same_depth.train.seq_len), 0.7 * base);
}
