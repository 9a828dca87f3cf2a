#include <gtest/gtest.h>

#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/hf_test_helpers.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/recipe.h"
#include "train/recipe/recipe_schema.h"

using namespace fathom;

namespace {

// Raw strings read best starting on their own line; drop that first newline so line numbers in
// messages match the text as shown (its first line is line 1).
std::string yaml(const char* text) { return text[0] == '\n' ? text + 1 : text; }

const std::string kMinimal = yaml(R"(
name: tiny
model:
  size: olmo2_14M
data:
  train: [data/a.txt]
train:
  batch_size: 4
  seq_len: 64
  steps: 100
  optimizer:
    lr: 3.0e-4
)");

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_recipe(text, "recipe.yaml", overrides);
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return "";
}

// `needle` replaced by `replacement` in the minimal recipe (which must contain it).
std::string minimal_with(const std::string& needle, const std::string& replacement) {
  std::string text = kMinimal;
  const auto at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  return text.replace(at, needle.size(), replacement);
}

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

}  // namespace

// ---- valid recipes ----

TEST(Recipe, MinimalRecipeGetsEveryDefault) {
  const Recipe r = parse_recipe(kMinimal, "recipe.yaml");
  EXPECT_EQ(r.name, "tiny");
  EXPECT_EQ(r.model_size, "olmo2_14M");
  EXPECT_EQ(r.model, named_model_size("olmo2_14M"));
  EXPECT_EQ(r.data.tokenizer, "bytes");
  EXPECT_EQ(r.data.train, std::vector<std::string>{"data/a.txt"});
  EXPECT_TRUE(r.data.validation.empty());
  EXPECT_EQ(r.data.documents, "lines");
  EXPECT_EQ(r.train.device, "auto");
  EXPECT_EQ(r.train.seed, 1234u);
  EXPECT_EQ(r.train.batch_size, 4);
  EXPECT_EQ(r.train.grad_accum, 1);
  EXPECT_EQ(r.train.seq_len, 64);
  EXPECT_EQ(r.train.steps, 100);
  EXPECT_EQ(r.train.tokens, 0);
  EXPECT_EQ(r.train.precision, "bf16");
  EXPECT_EQ(r.train.threads, 0);
  EXPECT_EQ(r.train.loss, (std::map<std::string, double>{{"ce", 1.0}, {"z_loss", 1e-5}}));
  EXPECT_EQ(r.train.recompute, "none");
  EXPECT_EQ(r.train.optimizer.lr, 3e-4);
  EXPECT_EQ(r.train.optimizer.beta1, 0.9);
  EXPECT_EQ(r.train.optimizer.beta2, 0.95);
  EXPECT_EQ(r.train.optimizer.eps, 1e-8);
  EXPECT_EQ(r.train.optimizer.weight_decay, 0.1);
  EXPECT_EQ(r.train.optimizer.clip, 1.0);
  EXPECT_EQ(r.train.schedule.type, "cosine");
  EXPECT_EQ(r.train.schedule.warmup_steps, 0);
  EXPECT_EQ(r.train.schedule.final_lr_fraction, 0.1);
  EXPECT_EQ(r.eval.every, 0);
  EXPECT_EQ(r.eval.batches, 8);
  EXPECT_EQ(r.checkpoint.every, 0);
  EXPECT_EQ(r.checkpoint.keep_last, 3);
  EXPECT_EQ(r.log.every, 10);
  EXPECT_EQ(r.log.dir, "runs/tiny");
}

TEST(Recipe, DefaultsSatisfyTheirOwnSchema) {
  Recipe defaults;
  for (const RecipeKey& key : recipe_keys()) {
    if (key.presence != Presence::optional || key.path == "model.size") continue;
    SCOPED_TRACE(key.path);
    std::visit(
        [&](auto field) {
          if constexpr (std::is_same_v<decltype(field), const KindOption*>) {
            // A layer kind's option: a number in its range, or a choice's index.
            const double value = field->get(defaults.model);
            if (field->type == KindOption::Type::choice)
              EXPECT_LT(size_t(value), key.choices.size()) << value;
            else
              EXPECT_TRUE(key.range.contains(value)) << value;
          } else {
            const auto& value = field(defaults);
            using T = std::decay_t<decltype(value)>;
            if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
              EXPECT_TRUE(key.range.contains(static_cast<double>(value))) << value;
            } else if constexpr (std::is_same_v<T, std::string>) {
              if (!key.choices.empty()) {
                EXPECT_NE(std::find(key.choices.begin(), key.choices.end(), value), key.choices.end()) << value;
              }
            }
          }
        },
        key.field);
  }
}

TEST(Recipe, SchemaSectionsAreContiguous) {
  // recipe_to_yaml writes each section once, so a section's keys must not be interleaved.
  std::vector<std::string> closed;
  std::string current;
  for (const RecipeKey& key : recipe_keys()) {
    const std::string section(parent_key_path(key.path));
    if (section == current) continue;
    EXPECT_EQ(std::find(closed.begin(), closed.end(), section), closed.end()) << key.path;
    closed.push_back(current);
    current = section;
  }
}

TEST(Recipe, ExplicitModelFieldsOverrideTheNamedSize) {
  const Recipe r = parse_recipe(yaml(R"(
model:
  n_layers: 2
  n_heads: 4
  size: olmo2_60M
  norm: pre
  qk_norm: false
  rope_theta: 10000
data: {train: a.txt}
train: {batch_size: 2, seq_len: 16, steps: 5, optimizer: {lr: 0.001}}
)"),
                                "recipe.yaml");
  EXPECT_EQ(r.model_size, "olmo2_60M");
  EXPECT_EQ(r.model.d_model, 384);
  EXPECT_EQ(r.model.n_layers, 2);
  EXPECT_EQ(r.model.n_heads, 4);
  EXPECT_EQ(r.model.n_kv_heads, 4);  // follows n_heads when not given
  EXPECT_EQ(r.model.ffn_hidden, 1536);
  EXPECT_EQ(r.model.vocab_size, 100352);
  EXPECT_EQ(r.model.norm, "pre");
  EXPECT_FALSE(r.model.qk_norm);
  EXPECT_EQ(r.model.rope_theta, 10000);
  EXPECT_EQ(r.data.train, std::vector<std::string>{"a.txt"});  // a single path is a list of one

  const Recipe gqa = parse_recipe(minimal_with("size: olmo2_14M", "size: olmo2_14M\n  n_kv_heads: 2"), "r.yaml");
  EXPECT_EQ(gqa.model.n_heads, 8);
  EXPECT_EQ(gqa.model.n_kv_heads, 2);
}

TEST(Recipe, CustomModelWithoutSize) {
  const Recipe r = parse_recipe(minimal_with("size: olmo2_14M", R"(d_model: 96
  n_layers: 3
  n_heads: 6
  n_kv_heads: 3
  ffn_hidden: 250
  vocab_size: 259)"),
                                "recipe.yaml");
  EXPECT_EQ(r.model_size, "");
  EXPECT_EQ(r.model.d_model, 96);
  EXPECT_EQ(r.model.head_dim(), 16);
  EXPECT_EQ(r.model.n_kv_heads, 3);
  EXPECT_EQ(r.model.ffn_hidden, 250);
  EXPECT_EQ(r.model.vocab_size, 259);
}

TEST(Recipe, TokensConvertToSteps) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t batch = std::uniform_int_distribution<int64_t>(1, 64)(rng);
    const int64_t accum = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const int64_t seq = std::uniform_int_distribution<int64_t>(2, 4096)(rng);
    const int64_t per_step = batch * accum * seq;
    // Sometimes an exact multiple, sometimes a remainder that needs one more step.
    const int64_t tokens = per_step * std::uniform_int_distribution<int64_t>(1, 1000)(rng) +
                           (trial % 2 ? std::uniform_int_distribution<int64_t>(1, per_step - 1)(rng) : 0);
    const std::string recipe_text =
        "model: {size: olmo2_14M}\ndata: {train: a.txt}\ntrain:\n  batch_size: " + std::to_string(batch) +
        "\n  grad_accum: " + std::to_string(accum) + "\n  seq_len: " + std::to_string(seq) +
        "\n  tokens: " + std::to_string(tokens) + "\n  optimizer: {lr: 0.001}\n";
    const Recipe r = parse_recipe(recipe_text, "recipe.yaml");
    EXPECT_EQ(r.train.tokens, tokens);
    EXPECT_EQ(r.train.tokens_per_step(), per_step);
    EXPECT_EQ(r.train.steps, (tokens + per_step - 1) / per_step) << recipe_text;
    EXPECT_GE(r.train.steps * per_step, tokens);
    EXPECT_LT((r.train.steps - 1) * per_step, tokens);
  }
  // Large budgets as people write them: scientific notation and digit groups.
  EXPECT_EQ(parse_recipe(minimal_with("steps: 100", "tokens: 2.56e6"), "r").train.steps, 10000);  // 256 per step
  EXPECT_EQ(parse_recipe(minimal_with("steps: 100", "tokens: 2_560_001"), "r").train.steps, 10001);
}

TEST(Recipe, ValidationDomainsAndDocuments) {
  const Recipe r = parse_recipe(minimal_with("train: [data/a.txt]", R"(train: [a.txt, b.txt]
  documents: files
  tokenizer: tokenizers/dolma2.json
  validation:
    web: [w1.txt, w2.txt]
    code: c.txt)"),
                                "recipe.yaml");
  EXPECT_EQ(r.data.train, (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(r.data.documents, "files");
  EXPECT_EQ(r.data.tokenizer, "tokenizers/dolma2.json");
  ASSERT_EQ(r.data.validation.size(), 2u);
  EXPECT_EQ(r.data.validation.at("web"), (std::vector<std::string>{"w1.txt", "w2.txt"}));
  EXPECT_EQ(r.data.validation.at("code"), std::vector<std::string>{"c.txt"});
}

// ---- --set overrides ----

TEST(RecipeOverrides, NestedListsAndMaps) {
  const Recipe r = parse_recipe(kMinimal, "recipe.yaml",
                                {"train.optimizer.lr=1e-3", "data.train=[x.txt, y.txt]",
                                 "data.validation={web: [w.txt], code: c.txt}", "eval.every=50", "model.norm=pre",
                                 "train.optimizer.beta2 = 0.99", "name=other", "train.seed=18446744073709551615"});
  EXPECT_EQ(r.train.optimizer.lr, 1e-3);
  EXPECT_EQ(r.train.optimizer.beta2, 0.99);
  EXPECT_EQ(r.data.train, (std::vector<std::string>{"x.txt", "y.txt"}));
  EXPECT_EQ(r.data.validation.at("web"), std::vector<std::string>{"w.txt"});
  EXPECT_EQ(r.data.validation.at("code"), std::vector<std::string>{"c.txt"});
  EXPECT_EQ(r.eval.every, 50);  // a section the file did not have
  EXPECT_EQ(r.model.norm, "pre");
  EXPECT_EQ(r.name, "other");
  EXPECT_EQ(r.log.dir, "runs/other");
  EXPECT_EQ(r.train.seed, 18446744073709551615ull);
}

TEST(RecipeOverrides, LastWinsAndStepsReplaceTokens) {
  EXPECT_EQ(parse_recipe(kMinimal, "r", {"train.steps=7", "train.steps=9"}).train.steps, 9);
  const std::string with_tokens = minimal_with("steps: 100", "tokens: 25600");
  EXPECT_EQ(parse_recipe(with_tokens, "r").train.steps, 100);
  const Recipe switched = parse_recipe(with_tokens, "r", {"train.steps=3"});
  EXPECT_EQ(switched.train.steps, 3);
  EXPECT_EQ(switched.train.tokens, 0);
  EXPECT_EQ(parse_recipe(kMinimal, "r", {"train.tokens=512"}).train.steps, 2);
  // Both from --set is still an error.
  EXPECT_CONTAINS(error_of(kMinimal, {"train.steps=3", "train.tokens=512"}), "both given");
}

TEST(RecipeOverrides, FillARequiredKey) {
  const std::string no_lr = minimal_with("  optimizer:\n    lr: 3.0e-4\n", "");
  EXPECT_CONTAINS(error_of(no_lr), "missing required key 'train.optimizer.lr'");
  EXPECT_EQ(parse_recipe(no_lr, "r", {"train.optimizer.lr=0.01"}).train.optimizer.lr, 0.01);
}

// ---- malformed recipes: every error names the place, the key path and what is wrong ----

namespace {

// A malformed recipe (or --set override) and the error it must give: the whole message, or for
// some a telling part of it.
enum class Match { whole, part };
struct RecipeErrorCase {
  std::string text;
  std::vector<std::string> overrides;
  std::string message;
  Match match = Match::whole;
};

}  // namespace

TEST(RecipeErrors, EachMalformedRecipeGetsItsMessage) {
  const std::vector<RecipeErrorCase> cases = {
      // ---- overrides on the command line ----
      {kMinimal,
       {"train.lerning_rate=3e-4"},
       "--set train.lerning_rate=3e-4: unknown key 'train.lerning_rate'; did you mean 'train.optimizer.lr'?"},
      {kMinimal, {"trian.steps=5"}, "--set trian.steps=5: unknown key 'trian.steps'; did you mean 'train.steps'?"},
      {kMinimal,
       {"train.batch_size=eight"},
       "--set train.batch_size=eight: train.batch_size must be an integer, got 'eight'"},
      {kMinimal,
       {"train.optimizer.beta1=1"},
       "--set train.optimizer.beta1=1: train.optimizer.beta1 must be in [0, 1), got 1"},
      {kMinimal, {"train.steps"}, "--set train.steps: expected key=value", Match::part},
      {kMinimal, {"=5"}, "expected key=value", Match::part},
      {kMinimal, {"train.optimizer=5"}, "'train.optimizer' is a section; set one of its keys: lr, beta1", Match::part},
      {kMinimal, {"data.train=[a, "}, "--set data.train=[a, : the value is not valid YAML", Match::part},
      {kMinimal,
       {"data.train=[a, [b]]"},
       "--set data.train=[a, [b]]: data.train[1] must be a path, got a list",
       Match::part},
      {kMinimal, {"name="}, "--set name=: name must be a string, got nothing", Match::part},
      // ---- unknown keys suggest the closest valid key ----
      {minimal_with("  steps: 100", "  steps: 100\n  lerning_rate: 3e-4"),
       {},
       "recipe.yaml:10:3: unknown key 'train.lerning_rate'; did you mean 'train.optimizer.lr'?"},
      {minimal_with("\ntrain:", "\ntrian:"), {}, "recipe.yaml:6:1: unknown key 'trian'; did you mean 'train'?"},
      {minimal_with("    lr: 3.0e-4", "    lr: 3.0e-4\n    wieght_decay: 0.1"),
       {},
       "recipe.yaml:12:5: unknown key 'train.optimizer.wieght_decay'; did you mean 'train.optimizer.weight_decay'?"},
      // A key written in the wrong section is found in the whole schema.
      {minimal_with("  size: olmo2_14M", "  size: olmo2_14M\n  warmup_steps: 10"),
       {},
       "recipe.yaml:4:3: unknown key 'model.warmup_steps'; did you mean 'train.schedule.warmup_steps'?"},
      // Names from other stacks.
      {minimal_with("  seq_len: 64", "  seq_len: 64\n  gradient_accumulation_steps: 2"),
       {},
       "recipe.yaml:9:3: unknown key 'train.gradient_accumulation_steps'; did you mean 'train.grad_accum'?"},
      // Nothing close: the valid keys of that section.
      {minimal_with("  size: olmo2_14M", "  size: olmo2_14M\n  zzzzzzzzzz: 1"),
       {},
       "recipe.yaml:4:3: unknown key 'model.zzzzzzzzzz'; valid keys in 'model': size, init_from, d_model, n_layers, "
       "n_heads, n_kv_heads, ffn_hidden, vocab_size, norm, qk_norm, rope_theta, tie_embeddings, norm_eps, init_std, "
       "init_cutoff, layers, rope_scaling"},
      // ---- wrong types ----
      {minimal_with("batch_size: 4", "batch_size: eight"),
       {},
       "recipe.yaml:7:15: train.batch_size must be an integer, got 'eight'"},
      {minimal_with("batch_size: 4", "batch_size: 8.5"),
       {},
       "recipe.yaml:7:15: train.batch_size must be an integer, got '8.5'"},
      {minimal_with("batch_size: 4", "batch_size: {per_device: 4}"),
       {},
       "recipe.yaml:7:15: train.batch_size must be an integer, got a mapping"},
      {minimal_with("lr: 3.0e-4", "lr: fast"), {}, "recipe.yaml:11:9: train.optimizer.lr must be a number, got 'fast'"},
      {minimal_with("lr: 3.0e-4", "lr:"), {}, "recipe.yaml:11:5: train.optimizer.lr must be a number, got nothing"},
      {minimal_with("lr: 3.0e-4", "lr: .nan"), {}, "recipe.yaml:11:9: train.optimizer.lr must be a number, got '.nan'"},
      {minimal_with("size: olmo2_14M", "size: olmo2_14M\n  qk_norm: maybe"),
       {},
       "recipe.yaml:4:12: model.qk_norm must be true or false, got 'maybe'"},
      {minimal_with("name: tiny", "name: [a, b]"), {}, "recipe.yaml:1:7: name must be a string, got a list"},
      {minimal_with("steps: 100", "steps: 100\n  seed: -1"),
       {},
       "recipe.yaml:10:9: train.seed must be a non-negative integer, got '-1'"},
      {minimal_with("train: [data/a.txt]", "train: {a: b}"),
       {},
       "recipe.yaml:5:10: data.train must be a path or a list of paths, got a mapping"},
      // ---- out of range ----
      {minimal_with("lr: 3.0e-4", "lr: 3.0e-4\n    beta2: 1.5"),
       {},
       "recipe.yaml:12:12: train.optimizer.beta2 must be in [0, 1), got 1.5"},
      {minimal_with("lr: 3.0e-4", "lr: 0"), {}, "recipe.yaml:11:9: train.optimizer.lr must be > 0, got 0"},
      {minimal_with("seq_len: 64", "seq_len: 1"), {}, "recipe.yaml:8:12: train.seq_len must be >= 2, got 1"},
      {minimal_with("steps: 100", "steps: 0"), {}, "recipe.yaml:9:10: train.steps must be >= 1, got 0"},
      {minimal_with("lr: 3.0e-4", "lr: 3.0e-4\n    clip: -1"),
       {},
       "recipe.yaml:12:11: train.optimizer.clip must be >= 0, got -1"},
      {minimal_with("  optimizer:", "  schedule: {final_lr_fraction: 1.25}\n  optimizer:"),
       {},
       "recipe.yaml:10:33: train.schedule.final_lr_fraction must be in [0, 1], got 1.25"},
      {kMinimal + "checkpoint: {keep_last: -1}\n",
       {},
       "checkpoint.keep_last must be in [0, 2147483647], got -1",
       Match::part},
      {kMinimal + "log: {every: 0}\n", {}, "log.every must be >= 1, got 0", Match::part},
      {kMinimal + "eval: {batches: 0}\n", {}, "eval.batches must be >= 1, got 0", Match::part},
      {kMinimal, {"train.threads=-2"}, "train.threads must be in [0, 1024], got -2", Match::part},
      {kMinimal, {"train.threads=100000"}, "train.threads must be in [0, 1024], got 100000", Match::part},
      {kMinimal, {"train.loss={ce: 1, z_loss: -1e-5}"}, "train.loss.z_loss must be >= 0, got -1e-5", Match::part},
      {kMinimal,
       {"train.tokens=1e20"},
       "--set train.tokens=1e20: train.tokens must be at most 9223372036854775807, got 1e20"},
      {kMinimal, {"train.seed=18446744073709551616"}, "train.seed must be at most 18446744073709551615", Match::part},
      {kMinimal,
       {"train.batch_size=1000000", "train.seq_len=1000000", "train.grad_accum=100000000"},
       "train.batch_size * train.grad_accum * train.seq_len overflows",
       Match::part},
      // ---- bad choices ----
      {minimal_with("size: olmo2_14M", "size: olmo2_14M\n  norm: middle"),
       {},
       "recipe.yaml:4:9: model.norm must be one of post, pre; got 'middle'"},
      {minimal_with("steps: 100", "steps: 100\n  precision: bf61"),
       {},
       "recipe.yaml:10:14: train.precision must be one of fp32, bf16, fp8; got 'bf61' (did you mean 'bf16'?)"},
      {minimal_with("size: olmo2_14M", "size: olmo2_15M"),
       {},
       "recipe.yaml:3:9: model.size must be one of olmo2_14M, olmo2_30M, olmo2_60M, olmo2_100M, olmo2_190M, "
       "olmo2_370M, olmo2_1B; got 'olmo2_15M' (did you mean 'olmo2_14M'?)"},
      {kMinimal,
       {"train.schedule.type=exponential"},
       "train.schedule.type must be one of cosine, linear, constant; got 'exponential'",
       Match::part},
      {kMinimal, {"train.device=gpu"}, "train.device must be one of auto, cpu, cuda; got 'gpu'", Match::part},
      {kMinimal, {"data.documents=paragraphs"}, "data.documents must be one of lines, files", Match::part},
      {kMinimal, {"train.recompute=all"}, "train.recompute must be one of none, selective, block", Match::part},
      // ---- missing required keys ----
      {minimal_with("  seq_len: 64\n", ""), {}, "recipe.yaml:6:1: missing required key 'train.seq_len'"},
      {minimal_with("  batch_size: 4\n  seq_len: 64\n", ""),
       {},
       "recipe.yaml:6:1: missing required key 'train.batch_size'; also missing: train.seq_len"},
      {minimal_with("data:\n  train: [data/a.txt]\n", ""), {}, "recipe.yaml: missing required key 'data.train'"},
      {minimal_with("  size: olmo2_14M", "  d_model: 64\n  n_heads: 4"),
       {},
       "recipe.yaml:2:1: missing required key 'model.n_layers' (or give model.size, one of olmo2_14M, olmo2_30M, "
       "olmo2_60M, olmo2_100M, olmo2_190M, olmo2_370M, olmo2_1B, or model.init_from); also missing: model.ffn_hidden, "
       "model.vocab_size"},
      {minimal_with("train: [data/a.txt]", "train: []"),
       {},
       "recipe.yaml:5:10: data.train must list at least one path"},
      // ---- steps and tokens ----
      {minimal_with("steps: 100", "steps: 100\n  tokens: 1000"),
       {},
       "recipe.yaml:10:11: train.steps (at recipe.yaml:9:10) and train.tokens are both given; give exactly one"},
      {minimal_with("  steps: 100\n", ""),
       {},
       "recipe.yaml:6:1: missing required key: give train.steps or train.tokens (the training length)"},
      // ---- invalid documents ----
      // yaml-cpp notices the unclosed list on the next line.
      {minimal_with("  seq_len: 64", "  seq_len: [64"), {}, "recipe.yaml:9:", Match::part},
      {minimal_with("  seq_len: 64", "  seq_len: [64"),
       {},
       "YAML syntax error: end of sequence flow not found",
       Match::part},
      {"train:\n\tsteps: 3\n", {}, "recipe.yaml:2:", Match::part},
      {"", {}, "recipe.yaml: the recipe is empty"},
      {"# nothing but a comment\n\n", {}, "recipe.yaml: the recipe is empty"},
      {"- model\n- train\n",
       {},
       "recipe.yaml:1:1: a recipe must be a mapping of sections (name, model, moda, mod, dsla, data, train, eval, "
       "checkpoint, distill, log), got a list"},
      {"just some words\n",
       {},
       "recipe.yaml:1:1: a recipe must be a mapping of sections (name, model, moda, mod, dsla, data, train, eval, "
       "checkpoint, distill, log), got 'just some words'"},
      {"# a comment\n, name: tiny\n",
       {},
       "recipe.yaml:2:1: YAML syntax error: ',' outside [...] or {...} (quote a value that holds a comma)"},
      {kMinimal + "---\nname: second\n",
       {},
       "recipe.yaml:13:1: a recipe is one YAML document, this file has 2 (separated by '---')"},
      {minimal_with("  optimizer:\n    lr: 3.0e-4", "  optimizer: adamw"),
       {},
       "recipe.yaml:10:14: 'train.optimizer' is a section, a mapping of its keys (lr, beta1, beta2, eps, weight_decay, "
       "clip), got 'adamw'"},
      {minimal_with("  steps: 100", "  steps: 100\n  batch_size: 8"),
       {},
       "recipe.yaml:10:3: duplicate key 'train.batch_size' (first given at line 7)"},
      {minimal_with("  steps: 100", "  steps: 100\n  [a]: 1"),
       {},
       "recipe.yaml:10:3: keys in 'train' must be names, got a list"},
      {minimal_with("name: tiny", "name: my run"),
       {},
       "recipe.yaml:1:7: name 'my run' may hold only letters, digits, '.', '_', '-' and '+' (it names the run folder)"},
      // ---- validation domains ----
      {minimal_with("train: [data/a.txt]", "train: [data/a.txt]\n  validation: [v.txt]"),
       {},
       "recipe.yaml:6:15: data.validation must be a mapping of domain name -> list of paths, got a list"},
      {minimal_with("train: [data/a.txt]", "train: [data/a.txt]\n  validation:\n    web: []"),
       {},
       "recipe.yaml:7:10: data.validation.web must list at least one path"},
      {minimal_with("train: [data/a.txt]", "train: [data/a.txt]\n  validation:\n    web: [a, {b: c}]"),
       {},
       "recipe.yaml:7:14: data.validation.web[1] must be a path, got a mapping"},
      {minimal_with("train: [data/a.txt]", "train: [data/a.txt]\n  validation:\n    web: a\n    web: b"),
       {},
       "recipe.yaml:8:5: duplicate domain 'data.validation.web'"},
      // ---- inconsistent model ----
      {minimal_with("  size: olmo2_14M", "  size: olmo2_14M\n  d_model: 100"),
       {},
       "recipe.yaml:2:1: inconsistent model: d_model (100) must be divisible by n_heads (8)"},
      {minimal_with("  size: olmo2_14M", "  size: olmo2_14M\n  n_kv_heads: 3"),
       {},
       "recipe.yaml:2:1: inconsistent model: n_heads (8) must be divisible by n_kv_heads (3)"},
      {kMinimal, {"model.d_model=24"}, "head_dim = d_model / n_heads = 24 / 8 = 3 must be even", Match::part},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const RecipeErrorCase& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + " (expecting: " + c.message + ")");
    const std::string message = error_of(c.text, c.overrides);
    if (c.match == Match::whole) {
      EXPECT_EQ(message, c.message);
    } else {
      EXPECT_CONTAINS(message, c.message);
    }
  }
}

TEST(RecipeErrors, SuggestionsOverTheWholeSchema) {
  EXPECT_EQ(unknown_key_message("lr"), "unknown key 'lr'; did you mean 'train.optimizer.lr'?");
  EXPECT_EQ(unknown_key_message("train.optimiser.lr"),
            "unknown key 'train.optimiser.lr'; did you mean 'train.optimizer.lr'?");
  EXPECT_EQ(unknown_key_message("eval.evry"),
            "unknown key 'eval.evry'; did you mean 'eval.every'?");  // same section wins
  EXPECT_EQ(unknown_key_message("log.evry"), "unknown key 'log.evry'; did you mean 'log.every'?");
  EXPECT_EQ(unknown_key_message("train.x"),
            "unknown key 'train.x'; valid keys in 'train': device, seed, batch_size, "
            "grad_accum, seq_len, steps, tokens, precision, threads, loss, "
            "trainable, frozen, recompute, grad_reduce, grad_bucket_kib, zero, optimizer, "
            "schedule");
}

// Found by fuzzing (tests/fuzz/findings): a ',' starting line 2 made yaml-cpp 0.7's LoadAll append
// empty documents forever (minutes, gigabytes); it is now refused at once.
TEST(RecipeErrors, FuzzedStrayCommaRecipeIsRefusedQuickly) {
  const std::string path = std::string(FATHOM_SOURCE_DIR) + "/tests/fuzz/findings/recipe_timeout.yaml";
  const auto start = std::chrono::steady_clock::now();
  const std::string message = fathom::testing::error_of([&] { load_recipe(path); });
  EXPECT_EQ(message, path + ":2:1: YAML syntax error: ',' outside [...] or {...} (quote a value that holds a comma)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(Recipe, BlockRecomputeWithMoDA) {
  // Accepted: a re-run MoDA block rewinds the depth stream and rewrites its own slots.
  const Recipe moda = parse_recipe(minimal_with("  steps: 100", "  steps: 100\n  recompute: block"), "recipe.yaml",
                                   {"moda.variant=attn_kv"});
  EXPECT_EQ(moda.train.recompute, "block");
  EXPECT_EQ(moda.model.options.get<MoDAConfig>().variant, MoDAVariant::attn_kv);
}

TEST(RecipeErrors, RecipeFiles) {
  const auto folder = std::filesystem::temp_directory_path() / ("fathom_recipe_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  const std::string path = (folder / "tiny.yaml").string();
  { std::ofstream(path) << kMinimal; }
  const Recipe r = load_recipe(path, {"train.steps=12"});
  EXPECT_EQ(r.train.steps, 12);
  EXPECT_EQ(r.name, "tiny");

  { std::ofstream(path) << minimal_with("batch_size: 4", "batch_size: eight"); }
  try {
    load_recipe(path);
    ADD_FAILURE() << "accepted a bad recipe file";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), path + ":7:15: train.batch_size must be an integer, got 'eight'");
  }
  { std::ofstream empty(path); }
  try {
    load_recipe(path);
    ADD_FAILURE() << "accepted an empty recipe file";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), path + ": the recipe is empty");
  }
  const std::string missing = (folder / "missing.yaml").string();
  try {
    load_recipe(missing);
    ADD_FAILURE() << "accepted a missing recipe file";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "recipe file '" + missing + "' does not exist");
  }
  try {
    load_recipe(folder.string());
    ADD_FAILURE() << "accepted a folder as a recipe";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "recipe '" + folder.string() + "' is not a regular file");
  }
  std::filesystem::remove_all(folder);
}

// ---- round trip ----

namespace {

Recipe random_recipe(std::mt19937_64& rng) {
  auto integer = [&](int64_t low, int64_t high) { return std::uniform_int_distribution<int64_t>(low, high)(rng); };
  auto real = [&](double low, double high) { return std::uniform_real_distribution<double>(low, high)(rng); };
  auto pick = [&](std::vector<std::string> choices) { return choices[integer(0, int64_t(choices.size()) - 1)]; };
  Recipe r;
  r.name = "run-" + std::to_string(integer(0, 99999)) + ".v" + std::to_string(integer(1, 9));
  if (integer(0, 1)) {
    r.model_size = pick(model_size_names());
    r.model = named_model_size(r.model_size);
  }
  r.model.n_kv_heads = integer(1, 4);
  r.model.n_heads = r.model.n_kv_heads * integer(1, 3);
  r.model.d_model = r.model.n_heads * 2 * integer(1, 32);
  r.model.n_layers = integer(1, 24);
  r.model.ffn_hidden = integer(1, 5000);
  r.model.vocab_size = integer(2, 200000);
  r.model.norm = pick({"post", "pre"});
  r.model.qk_norm = integer(0, 1);
  r.model.rope_theta = real(1e3, 1e6);
  r.model.norm_eps = real(1e-8, 1e-4);
  r.model.init_std = real(1e-3, 0.1);
  r.model.init_cutoff = real(1, 4);
  r.model.tie_embeddings = integer(0, 1);
  r.model.rope_scaling = {pick({"none", "llama3"}), real(1, 16), real(0.5, 2), real(2.5, 8), integer(1, 1 << 17)};
  r.data.tokenizer = pick({"bytes", "tok/gpt2.json", "null", "true", "123"});
  for (int64_t i = integer(1, 4); i > 0; --i)
    r.data.train.push_back("data/shard " + std::to_string(integer(0, 999)) + ".bin");
  for (int64_t i = integer(0, 3); i > 0; --i) {
    r.data.validation["domain" + std::to_string(i)] = {"val/" + std::to_string(integer(0, 99)) + ".txt", "#x: y"};
  }
  r.data.documents = pick({"lines", "files"});
  r.train.device = pick({"auto", "cpu", "cuda"});
  r.train.seed = std::uniform_int_distribution<uint64_t>()(rng);
  r.train.batch_size = integer(1, 512);
  r.train.grad_accum = integer(1, 16);
  r.train.seq_len = integer(2, 8192);
  if (integer(0, 1)) {
    r.train.tokens = integer(1, int64_t(1) << 40);
    r.train.steps = (r.train.tokens + r.train.tokens_per_step() - 1) / r.train.tokens_per_step();
  } else {
    r.train.steps = integer(1, 1000000);
  }
  r.train.precision = pick({"fp32", "bf16", "fp8"});
  r.train.threads = integer(0, 64);
  r.train.loss["z_loss"] = real(0, 1e-3);
  r.train.recompute = pick({"none", "selective", "block"});
  r.train.optimizer = {real(1e-6, 1e-1), real(0, 0.999), real(0, 0.999), real(1e-12, 1e-6), real(0, 0.5), real(0, 5)};
  r.train.schedule = {pick({"cosine", "linear", "constant"}), integer(0, 10000), real(0, 1)};
  r.eval = {integer(0, 5000), integer(1, 100)};
  r.checkpoint = {integer(0, 5000), integer(1, 10)};
  r.log = {integer(1, 100), "out/" + r.name};
  return r;
}

}  // namespace

TEST(Recipe, RoundTripsThroughYaml) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 60; ++trial) {
    const Recipe original = random_recipe(rng);
    const std::string text = recipe_to_yaml(original);
    Recipe parsed;
    ASSERT_NO_THROW(parsed = parse_recipe(text, "resolved.yaml")) << text;
    EXPECT_TRUE(parsed == original) << text << "\n---\n" << recipe_to_yaml(parsed);
    EXPECT_EQ(recipe_to_yaml(parsed), text);
  }
  // A parsed recipe's resolved form parses back to itself, defaults and derived keys included.
  const Recipe minimal = parse_recipe(kMinimal, "recipe.yaml");
  EXPECT_TRUE(parse_recipe(recipe_to_yaml(minimal), "resolved.yaml") == minimal) << recipe_to_yaml(minimal);
}

TEST(Recipe, ResolvedYamlIsExplicitAndReadable) {
  const Recipe r = parse_recipe(minimal_with("steps: 100", "tokens: 25601"), "recipe.yaml");
  const std::string text = recipe_to_yaml(r);
  for (const RecipeKey& key : recipe_keys()) {
    if (key.path == "train.steps") continue;         // this recipe spells its length in tokens
    if (key.path == "model.init_from") continue;     // this recipe starts from a random init
    if (key.path.starts_with("distill.")) continue;  // only distillation recipes have the section
    EXPECT_CONTAINS(text, std::string(last_key_name(key.path)) + ":");
  }
  EXPECT_CONTAINS(text, "tokens: 25601  # 101 steps of 256 tokens");
  EXPECT_CONTAINS(text, "lr: 0.0003\n");
  EXPECT_CONTAINS(text, "loss: {ce: 1, z_loss: 1e-05}\n");
  EXPECT_CONTAINS(text, "dir: runs/tiny\n");
  EXPECT_CONTAINS(text, "rope_theta: 500000\n");
  EXPECT_CONTAINS(text, "eps: 1e-08\n");
  EXPECT_CONTAINS(text, "validation: {}\n");
  // Strings that other YAML readers would take for a number, bool or null are quoted.
  const std::string quoted =
      recipe_to_yaml(parse_recipe(kMinimal, "r", {"data.tokenizer='2'", "name=yes", "data.train=[null.bin, '1']"}));
  EXPECT_CONTAINS(quoted, "tokenizer: \"2\"\n");
  EXPECT_CONTAINS(quoted, "name: \"yes\"\n");
  EXPECT_CONTAINS(quoted, "- null.bin\n    - \"1\"\n");
}

// ---- model.init_from ----

namespace {

// A recipe whose model section is `model` (YAML flow mapping text).
std::string with_model(const std::string& model) {
  return minimal_with("model:\n  size: olmo2_14M", "model: " + model);
}

}  // namespace

TEST(RecipeInitFrom, HfFolderGivesTheModel) {
  fathom::testing::ScratchFolder dir;
  write_file_atomically(dir / "config.json", fathom::test::tiny_hf_config("LlamaForCausalLM").text());
  const std::string spec = "hf:" + dir.path().string();
  const Recipe r = parse_recipe(with_model("{init_from: '" + spec + "'}"), "recipe.yaml");
  EXPECT_EQ(r.model_init_from, spec);
  EXPECT_EQ(r.model, read_hf_config(dir.path().string()).config);
  EXPECT_EQ(r.model.n_kv_heads, 2);  // the source's, not n_heads
  // Keys that restate the source are fine; init_std is not part of the network.
  EXPECT_EQ(
      parse_recipe(with_model("{init_from: '" + spec + "', d_model: 24, norm: pre, qk_norm: false, init_std: 0.5}"),
                   "recipe.yaml")
          .model.init_std,
      0.5);
  // The resolved recipe names the source and parses back to itself.
  const std::string text = recipe_to_yaml(r);
  EXPECT_CONTAINS(text, "init_from: " + spec + "\n");
  EXPECT_TRUE(parse_recipe(text, "resolved.yaml") == r) << text;
  EXPECT_TRUE(parse_saved_recipe(text, "resolved.yaml") == r) << text;
}

TEST(RecipeInitFrom, DisagreeingKeysNameBothValues) {
  fathom::testing::ScratchFolder dir;
  write_file_atomically(dir / "config.json", fathom::test::tiny_hf_config("Olmo2ForCausalLM").text());
  const std::string spec = "hf:" + dir.path().string();
  const std::string wrong_width = error_of(with_model("{init_from: '" + spec + "', d_model: 64}"));
  EXPECT_CONTAINS(wrong_width, "recipe.yaml:2:");
  EXPECT_CONTAINS(wrong_width,
                  ": model.d_model is 64, but model.init_from " + spec + " gives 24; drop the key or make it agree");
  EXPECT_CONTAINS(error_of(with_model("{init_from: '" + spec + "', norm: pre}")),
                  "model.norm is 'pre', but model.init_from");
  EXPECT_CONTAINS(
      error_of(with_model("{init_from: '" + spec + "'}"), {"model.rope_theta=500000"}),
      "--set model.rope_theta=500000: model.rope_theta is 500000, but model.init_from " + spec + " gives 10000");
  EXPECT_CONTAINS(error_of(with_model("{init_from: '" + spec + "', tie_embeddings: true}")),
                  "model.tie_embeddings is true, but model.init_from " + spec + " gives false");
}

TEST(RecipeInitFrom, CheckpointGivesItsRecipesModel) {
  fathom::testing::ScratchFolder dir;
  Recipe source = parse_recipe(kMinimal, "source.yaml", {"model.n_kv_heads=2", "model.tie_embeddings=true"});
  save_checkpoint(dir / "run", 3, CheckpointData{{}, {}, "{}", recipe_to_yaml(source)}, 0);
  const Recipe r = parse_recipe(with_model("{init_from: 'checkpoint:" + (dir / "run").string() + "'}"), "recipe.yaml");
  EXPECT_EQ(r.model, source.model);
  EXPECT_EQ(r.model_size, "");
}

TEST(RecipeInitFrom, Errors) {
  EXPECT_EQ(error_of(with_model("{init_from: 'models/x'}")),
            "recipe.yaml:2:20: model.init_from: 'models/x' must be hf:DIR (a HuggingFace checkpoint folder) or "
            "checkpoint:DIR (a fathom checkpoint or run folder)");
  EXPECT_CONTAINS(error_of(with_model("{init_from: 'hf:'}")), "'hf:' names no folder after 'hf:'");
  EXPECT_CONTAINS(error_of(with_model("{init_from: 'hf:/no/such/folder'}")),
                  "recipe.yaml:2:20: model.init_from: HF checkpoint folder '/no/such/folder' does not exist");
  EXPECT_CONTAINS(error_of(with_model("{init_from: 'checkpoint:/no/such/run'}")), "model.init_from: ");
  EXPECT_CONTAINS(error_of(with_model("{init_from: 'hf:/x', size: olmo2_14M}")),
                  "model.init_from and model.size (at recipe.yaml:2:");
  fathom::testing::ScratchFolder dir;
  write_file_atomically(
      dir / "config.json",
      fathom::test::tiny_hf_config("Olmo2ForCausalLM").set("architectures", "[\"GPT2LMHeadModel\"]").text());
  EXPECT_CONTAINS(error_of(with_model("{init_from: 'hf:" + dir.path().string() + "'}")),
                  "architecture 'GPT2LMHeadModel' is not supported");
  // Without init_from or size, the shape keys are required, and the message names both ways out.
  EXPECT_CONTAINS(error_of(with_model("{norm: pre}")), "(or give model.size, one of olmo2_14M");
  EXPECT_CONTAINS(error_of(with_model("{norm: pre}")), ", or model.init_from)");
}

TEST(RecipeInitFrom, SavedRecipesDoNotNeedTheSource) {
  fathom::testing::ScratchFolder dir;
  write_file_atomically(dir / "config.json", fathom::test::tiny_hf_config("Olmo2ForCausalLM").text());
  const Recipe r = parse_recipe(with_model("{init_from: 'hf:" + dir.path().string() + "'}"), "recipe.yaml");
  const std::string saved = recipe_to_yaml(r);
  std::filesystem::remove(dir / "config.json");
  EXPECT_TRUE(parse_saved_recipe(saved, "saved.yaml") == r);
  EXPECT_CONTAINS(error_of(saved), "has no config.json");
}

// A run that already has weights (--resume, eval of a checkpoint) takes its model from the
// checkpoint, so model.init_from's source may be gone by then.
TEST(RecipeInitFrom, RunsWithWeightsTakeTheModelFromTheirCheckpoint) {
  fathom::testing::ScratchFolder dir;
  fathom::testing::ScratchFolder hf;
  write_file_atomically(hf / "config.json", fathom::test::tiny_hf_config("Olmo2ForCausalLM").text());
  const std::string spec = "hf:" + hf.path().string();
  const std::string run = (dir / "run").string();
  const std::string text = with_model("{init_from: '" + spec + "'}");
  const std::vector<std::string> overrides = {"log.dir=" + run};
  const Recipe started = parse_recipe(text, "recipe.yaml", overrides);
  save_checkpoint(run, 2, CheckpointData{{}, {}, "{}", recipe_to_yaml(started)}, 0);
  std::filesystem::remove(hf / "config.json");

  const ModelOrigin own_run{ModelOrigin::Kind::own_run, ""};
  const ModelOrigin evaluated{ModelOrigin::Kind::checkpoint, run};
  EXPECT_TRUE(parse_recipe(text, "recipe.yaml", overrides, own_run) == started);
  EXPECT_TRUE(parse_recipe(text, "recipe.yaml", overrides, evaluated) == started);
  // A new run still needs the source.
  EXPECT_CONTAINS(error_of(text, overrides), "has no config.json");
  // The run folder follows log.dir as resolve() sets it, including the runs/<name> default.
  EXPECT_CONTAINS(
      fathom::testing::error_of([&] { parse_recipe(text, "recipe.yaml", {}, own_run); }),
      "recipe.yaml:2:20: model.init_from: the model comes from the run's latest checkpoint, not from " + spec + ": ");
  EXPECT_CONTAINS(fathom::testing::error_of([&] { parse_recipe(text, "recipe.yaml", {}, own_run); }), "runs/tiny");
  EXPECT_CONTAINS(fathom::testing::error_of([&] {
                    parse_recipe(text, "recipe.yaml", {}, {ModelOrigin::Kind::checkpoint, (dir / "none").string()});
                  }),
                  "model.init_from: the model comes from the checkpoint, not from " + spec);
  // Explicit model keys must agree with the checkpoint's model, which the message names.
  EXPECT_CONTAINS(fathom::testing::error_of([&] {
                    parse_recipe(with_model("{init_from: '" + spec + "', d_model: 64}"), "recipe.yaml", overrides,
                                 own_run);
                  }),
                  "model.d_model is 64, but the checkpoint in '" + run + "' gives 24; drop the key or make it agree");
  // Recipes without init_from keep their own model whatever the origin.
  const ModelOrigin elsewhere{ModelOrigin::Kind::checkpoint, (dir / "none").string()};
  EXPECT_TRUE(parse_recipe(kMinimal, "recipe.yaml", {}, elsewhere) == parse_recipe(kMinimal, "recipe.yaml"));
}

TEST(Recipe, RopeScalingAndTiedEmbeddingKeys) {
  const Recipe r = parse_recipe(kMinimal, "recipe.yaml",
                                {"model.rope_scaling.type=llama3", "model.rope_scaling.factor=32",
                                 "model.rope_scaling.original_max_position=4096", "model.tie_embeddings=true"});
  EXPECT_EQ(r.model.rope_scaling, (RopeScaling{"llama3", 32.0, 1.0, 4.0, 4096}));
  EXPECT_TRUE(r.model.tie_embeddings);
  EXPECT_CONTAINS(error_of(kMinimal, {"model.rope_scaling.type=yarn"}),
                  "model.rope_scaling.type must be one of none, llama3");
  EXPECT_CONTAINS(error_of(kMinimal, {"model.rope_scaling.type=llama3", "model.rope_scaling.high_freq_factor=0.5"}),
                  "inconsistent model: rope_scaling.high_freq_factor (0.5) must be greater than low_freq_factor (1)");
  EXPECT_CONTAINS(error_of(kMinimal, {"model.rope_scaling.factor=0"}), "model.rope_scaling.factor must be > 0");
}
