// Training from `fathom data prep` output: the committed corpus sample is prepared with the bytes
// tokenizer, a tiny model trains from the train shards, and both validation domains (shard
// sources) are evaluated and reported in metrics.jsonl and by `fathom eval`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "data/prep.h"
#include "tests/support/test_support.h"
#include "train/measure/evaluator.h"
#include "train/recipe/recipe.h"
#include "train/run/trainer.h"

using namespace fathom;
namespace fs = std::filesystem;

TEST(TrainPrepared, TrainsFromPreparedShardsAndReportsEveryValidationDomain) {
  fathom::testing::ScratchFolder dir;
  const std::string sample = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/sample";
  PrepOptions prep;
  prep.tokenizer = "bytes";
  prep.out = (dir / "prepared").string();
  for (const char* name : {"sotu_1790-2014", "kjv", "web", "austen"})
    prep.train.push_back(sample + "/train/" + name + ".txt");
  prep.validation = {{"moby_dick", {sample + "/validation/moby_dick.txt"}},
                     {"sotu_recent", {sample + "/validation/sotu_2015-2021.txt"}}};
  prep.threads = 2;
  prep.shard_tokens = 400'000;  // several train shards, read as one stream
  const PrepResult prepared = prepare_data(prep);
  ASSERT_GT(prepared.splits[0].shards.size(), 1u);

  const std::string out = (dir / "prepared").string();
  const std::string yaml =
      "name: tiny-prepared\n"
      "model: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64, vocab_size: 264}\n"
      "data:\n"
      "  tokenizer: bytes\n"
      "  train: [" +
      out +
      "/train]\n"
      "  validation:\n"
      "    moby_dick: [" +
      out +
      "/validation/moby_dick]\n"
      "    sotu_recent: [" +
      out +
      "/validation/sotu_recent]\n"
      "train: {device: cpu, threads: 2, batch_size: 4, seq_len: 32, steps: 5, optimizer: {lr: 3.0e-3}}\n"
      "eval: {every: 0, batches: 2}\n"
      "checkpoint: {every: 0}\n"
      "log: {every: 1, dir: " +
      (dir / "run").string() + "}\n";
  const Recipe recipe = parse_recipe(yaml, "tiny-prepared.yaml");
  RunOptions quiet;
  quiet.quiet = true;
  const TrainResult result = run_training(recipe, quiet);
  EXPECT_EQ(result.steps_done, 5);
  ASSERT_EQ(result.validation_loss.size(), 2u);

  // metrics.jsonl: one eval line per domain, each with its loss and perplexity.
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  std::map<std::string, double> eval_loss;
  for (std::string line; std::getline(metrics, line);) {
    const YAML::Node m = parse_json(line, "metrics.jsonl");
    if (m["kind"].as<std::string>() != "eval") continue;
    for (const char* domain : {"moby_dick", "sotu_recent"}) {
      if (!m[std::string("loss/") + domain]) continue;
      eval_loss[domain] = m[std::string("loss/") + domain].as<double>();
      EXPECT_TRUE(m[std::string("ppl/") + domain]) << line;
    }
  }
  ASSERT_EQ(eval_loss.size(), 2u);
  for (const auto& [domain, loss] : eval_loss) {
    EXPECT_DOUBLE_EQ(loss, result.validation_loss.at(domain)) << domain;
    EXPECT_TRUE(std::isfinite(loss)) << domain;
    EXPECT_LT(loss, 6.0) << domain;  // about ln(264) = 5.58 after five steps
  }

  // `fathom eval` reads the same shard sources and reproduces the numbers.
  std::ostringstream evaluated;
  run_evaluation(recipe, (dir / "run").string(), evaluated);
  for (const auto& [domain, loss] : eval_loss) {
    char expected[64];
    std::snprintf(expected, sizeof expected, "loss %.4f", loss);
    const size_t at = evaluated.str().find(domain);
    ASSERT_NE(at, std::string::npos) << evaluated.str();
    EXPECT_NE(evaluated.str().find(expected, at), std::string::npos) << evaluated.str();
  }
}
