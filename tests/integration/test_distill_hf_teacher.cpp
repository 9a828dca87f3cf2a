// A whole distillation chain whose teacher is a Hugging Face folder: the tiny teacher exported by
// `fathom export --format hf` (f32, so nothing rounds) and read back through `hf:DIR`. The chain must
// be the one its fathom checkpoint gives, bit for bit: the same order, the same M_k weights, the same
// losses.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "distill_test_helpers.h"
#include "layers/hf_export.h"
#include "train/checkpoint/checkpoint.h"
#include "train/distill/distill_chain.h"

using namespace fathom;
namespace fs = std::filesystem;
using fathom::testing::distill_yaml;
using fathom::testing::ScratchFolder;
using fathom::testing::tiny_teacher;
using fathom::testing::weights_of;

namespace {

// The distillation recipe of the tiny teacher, with `teacher` as its teacher.
std::string with_teacher(std::string yaml, const std::string& teacher) {
  const std::string own = "checkpoint:" + tiny_teacher().string();
  const size_t at = yaml.find(own);
  EXPECT_NE(at, std::string::npos);
  return yaml.replace(at, own.size(), teacher);
}

}  // namespace

TEST(DistillHfTeacher, AnExportedTeacherGivesTheChainOfItsCheckpoint) {
  ScratchFolder dir;
  const fs::path checkpoint = resolve_checkpoint(tiny_teacher().string());
  const CheckpointData saved = load_checkpoint(checkpoint, CheckpointUse::model_only);
  const Recipe teacher_recipe = parse_saved_recipe(saved.recipe_yaml, "teacher recipe");
  HfExportOptions options;
  options.max_position_embeddings = teacher_recipe.train.seq_len;
  export_hf_model(teacher_recipe.model, saved.model, (dir / "hf").string(), options);

  const std::string section = "order: entropy, layers: 2, loss: {ce: 1, logit_kl: 1, layer_align: 1}";
  DistillOptions quiet;
  quiet.quiet = true;
  const DistillResult own =
      run_distillation(parse_recipe(distill_yaml(dir / "own", section, 6), "distill.yaml"), quiet);
  const DistillResult hf = run_distillation(
      parse_recipe(with_teacher(distill_yaml(dir / "hf_chain", section, 6), "hf:" + (dir / "hf").string()),
                   "distill.yaml"),
      quiet);

  ASSERT_EQ(hf.models.size(), 2u);
  EXPECT_EQ(hf.order, own.order);
  EXPECT_EQ(hf.teacher.validation.at("moby_dick").loss, own.teacher.validation.at("moby_dick").loss);
  for (size_t k = 0; k < 2; ++k) {
    const std::string m = "M_" + std::to_string(k + 1);
    EXPECT_EQ(hf.models[k].measures.validation.at("moby_dick").loss,
              own.models[k].measures.validation.at("moby_dick").loss)
        << m;
    EXPECT_EQ(weights_of(dir / "hf_chain" / m), weights_of(dir / "own" / m)) << m;
  }
}
