// The recipe reference (`fathom recipe reference`) and the --resume check read the same schema rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "train/recipe/recipe_reference.h"
#include "train/recipe/recipe_schema.h"
#include "train/recipe/resume_check.h"

using namespace fathom;

namespace {

const RecipeKey& key(const std::string& path) {
  const RecipeKey* found = find_recipe_key(path);
  EXPECT_NE(found, nullptr) << path;
  return *found;
}

// The table's row of a key, split into its cells.
std::vector<std::string> row_of(const std::string& path) {
  std::istringstream table(recipe_reference_markdown());
  const std::string start = "| `" + path + "` |";
  for (std::string line; std::getline(table, line);) {
    if (!line.starts_with(start)) continue;
    // "| a | b |": an escaped bar inside a cell is "\\|", never " | ".
    const std::string inner = line.substr(2, line.size() - 4);
    std::vector<std::string> cells;
    size_t at = 0;
    for (size_t bar; (bar = inner.find(" | ", at)) != std::string::npos; at = bar + 3) {
      cells.push_back(inner.substr(at, bar - at));
    }
    cells.push_back(inner.substr(at));
    return cells;
  }
  ADD_FAILURE() << "no row for " << path;
  return {};
}

}  // namespace

TEST(RecipeReference, EveryKeyHasOneShortLineOfMeaning) {
  for (const RecipeKey& k : recipe_keys()) {
    EXPECT_FALSE(k.doc.empty()) << k.path;
    EXPECT_EQ(k.doc.find('\n'), std::string::npos) << k.path;
    EXPECT_EQ(k.doc.find('|'), std::string::npos) << k.path;
    EXPECT_LE(k.doc.size(), 240u) << k.path << ": the reference's meaning is one short sentence";
    EXPECT_TRUE(k.doc.ends_with(".")) << k.path;
  }
}

TEST(RecipeReference, OneRowPerKeyInSchemaOrder) {
  const std::string table = recipe_reference_markdown();
  std::istringstream lines(table);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(line, "| key | default | accepts | on `--resume` | meaning |");
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(line, "|---|---|---|---|---|");
  for (const RecipeKey& k : recipe_keys()) {
    ASSERT_TRUE(std::getline(lines, line)) << k.path;
    EXPECT_TRUE(line.starts_with("| `" + k.path + "` | ")) << line;
    EXPECT_TRUE(line.ends_with(" |")) << line;
  }
  EXPECT_FALSE(std::getline(lines, line)) << "a row without a key: " << line;
  EXPECT_TRUE(table.ends_with("\n"));
}

TEST(RecipeReference, DefaultsComeFromTheRecipeOrItsPresence) {
  EXPECT_EQ(describe_default(key("name")), "`'run'`");
  EXPECT_EQ(describe_default(key("train.optimizer.beta2")), "`0.95`");
  EXPECT_EQ(describe_default(key("train.loss")), "`{ce: 1, z_loss: 1e-05}`");
  EXPECT_EQ(describe_default(key("moda.variant")), "`'none'`");
  EXPECT_EQ(describe_default(key("model.qk_norm")), "`true`");
  EXPECT_EQ(describe_default(key("model.layers")), "`[]`");
  EXPECT_EQ(describe_default(key("model.size")), "none");  // an empty string
  EXPECT_EQ(describe_default(key("train.optimizer.lr")), "required");
  EXPECT_EQ(describe_default(key("data.train")), "required");
  EXPECT_EQ(describe_default(key("model.d_model")), "from `model.size`");
  EXPECT_EQ(describe_default(key("log.dir")), "derived");
  EXPECT_EQ(describe_default(key("train.steps")), "`train.steps` or `train.tokens` required");
}

TEST(RecipeReference, AcceptedValuesComeFromTypeRangeAndChoices) {
  EXPECT_EQ(describe_accepted(key("model.norm")), "one of post, pre");
  EXPECT_EQ(describe_accepted(key("train.optimizer.beta1")), "a number in [0, 1)");
  EXPECT_EQ(describe_accepted(key("train.batch_size")), "an integer >= 1");
  EXPECT_TRUE(describe_accepted(key("train.loss")).starts_with("a mapping of name -> number >= 0; names: ce, z_loss, "))
      << describe_accepted(key("train.loss"));
  EXPECT_EQ(describe_accepted(key("model.layers")), "a list of layer kinds; names: attention, dsla");
  EXPECT_EQ(describe_accepted(key("distill.layers")), "a list of counts or fractions");
  EXPECT_EQ(describe_accepted(key("distill.order")), "a list of orders (entropy, sensitivity or a layer index)");
}

TEST(RecipeReference, ResumeColumnIsTheResumeChecksProperty) {
  // What `train --resume` may change: the run's length, reporting and checkpointing, and where and how
  // fast it runs. Pinned here, so that a key changing sides is a decision.
  const std::vector<std::string> expected = {"name",
                                             "data.validation",
                                             "data.verify",
                                             "train.device",
                                             "train.steps",
                                             "train.tokens",
                                             "train.threads",
                                             "train.recompute",
                                             "train.grad_accum",
                                             "train.grad_reduce",
                                             "train.grad_bucket_kib",
                                             "train.zero",
                                             "eval.every",
                                             "eval.batches",
                                             "checkpoint.every",
                                             "checkpoint.keep_last",
                                             "log.every",
                                             "log.dir"};
  std::vector<std::string> got = keys_changeable_on_resume(), want = expected;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  for (const RecipeKey& k : recipe_keys()) {
    const std::vector<std::string> cells = row_of(k.path);
    ASSERT_EQ(cells.size(), 5u) << k.path;
    EXPECT_EQ(cells[3], k.resumable ? "may change" : "must match") << k.path;
    const bool listed = std::find(got.begin(), got.end(), k.path) != got.end();
    EXPECT_EQ(listed, k.resumable) << k.path;
  }
}

TEST(RecipeReference, ResumeCheckRefusesExactlyTheFixedKeys) {
  Recipe saved;
  saved.train.batch_size = 4;
  Recipe now = saved;
  now.train.steps = saved.train.steps + 10;  // resumable
  now.log.every = 3;                         // resumable
  EXPECT_NO_THROW(check_resume_compatible(saved, now, "saved.yaml"));
  now.train.seed = 99;  // fixed
  try {
    check_resume_compatible(saved, now, "saved.yaml");
    ADD_FAILURE() << "a changed seed must be refused";
  } catch (const Error& e) {
    const std::string message = e.message();
    EXPECT_NE(message.find("train.seed: 1234 in the run, 99 in the recipe"), std::string::npos) << message;
    EXPECT_EQ(message.find("train.steps:"), std::string::npos) << message;
    EXPECT_EQ(message.find("log.every:"), std::string::npos) << message;
    EXPECT_NE(message.find("keys that may change on resume: name, "), std::string::npos) << message;
  }
}
