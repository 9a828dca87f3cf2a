// A distilled model's recorded measures (train/distill/distill_report.h): they read back bit for bit, an
// evaluation of other eval.batches or other domains is not reused, and a damaged record is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/file_io.h"
#include "tests/support/test_support.h"
#include "train/distill/distill_report.h"

using namespace fathom;
using fathom::testing::ScratchFolder;

namespace {
ModelMeasures sample() {
  ModelMeasures m;
  m.validation["moby_dick"] = EvalResult{std::log(123.456789), 123.456789, 4096, {}};
  m.validation["sotu"] = EvalResult{1.0 / 3.0, std::exp(1.0 / 3.0), 512, {}};
  m.kv_bytes_per_1k_tokens = 3072000;
  m.decode_tokens_per_second = 1234.5678901234;
  return m;
}
}  // namespace

TEST(DistillMeasures, ReadBackBitForBit) {
  ScratchFolder dir;
  const ModelMeasures m = sample();
  write_measures(dir / "measures.json", m, 8);
  const auto back = read_measures(dir / "measures.json", 8, {"moby_dick", "sotu"});
  ASSERT_TRUE(back.has_value());
  for (const auto& [domain, e] : m.validation) {
    EXPECT_EQ(back->validation.at(domain).loss, e.loss) << domain;
    EXPECT_EQ(back->validation.at(domain).perplexity, e.perplexity) << domain;
    EXPECT_EQ(back->validation.at(domain).tokens, e.tokens) << domain;
  }
  EXPECT_EQ(back->kv_bytes_per_1k_tokens, m.kv_bytes_per_1k_tokens);
  EXPECT_EQ(back->decode_tokens_per_second, m.decode_tokens_per_second);
}

TEST(DistillMeasures, AnotherEvaluationIsNotReused) {
  ScratchFolder dir;
  write_measures(dir / "measures.json", sample(), 8);
  EXPECT_FALSE(read_measures(dir / "none.json", 8, {"moby_dick", "sotu"}).has_value());
  EXPECT_FALSE(read_measures(dir / "measures.json", 4, {"moby_dick", "sotu"}).has_value());   // eval.batches changed
  EXPECT_FALSE(read_measures(dir / "measures.json", 8, {"moby_dick"}).has_value());           // a domain dropped
  EXPECT_FALSE(read_measures(dir / "measures.json", 8, {"moby_dick", "other"}).has_value());  // one renamed
}

TEST(DistillMeasures, ADamagedRecordIsAnError) {
  ScratchFolder dir;
  fathom::testing::write_bytes(dir / "a.json", "{\"eval_batches\": 8}");
  fathom::testing::expect_error([&] { read_measures(dir / "a.json", 8, {"moby_dick"}); }, {"a.json", "'validation'"});
  fathom::testing::write_bytes(dir / "b.json",
                               "{\"eval_batches\": 8, \"validation\": {\"moby_dick\": {\"loss\": \"x\", "
                               "\"perplexity\": 1, \"tokens\": 1}}, \"kv_bytes_per_1k_tokens\": 0, "
                               "\"decode_tokens_per_second\": 0}");
  fathom::testing::expect_error([&] { read_measures(dir / "b.json", 8, {"moby_dick"}); },
                                {"b.json", "'loss' must be a number", "delete the file"});
  fathom::testing::write_bytes(dir / "c.json", "{\"eval_batches\": 8,");
  fathom::testing::expect_error([&] { read_measures(dir / "c.json", 8, {"moby_dick"}); }, {"c.json"});
}

// A diverged model's loss is recorded as JSON's null (JSON has no NaN), in its measures and in the chain's
// distill.json, and reads back as NaN: the chain reports it rather than failing to write its files.
TEST(DistillMeasures, ADivergedModelIsRecordedAsNull) {
  ScratchFolder dir;
  ModelMeasures m = sample();
  m.validation["moby_dick"].loss = std::nan("");
  m.validation["moby_dick"].perplexity = std::numeric_limits<double>::infinity();
  write_measures(dir / "measures.json", m, 8);
  const std::string text = read_file(dir / "measures.json");
  EXPECT_NE(text.find("\"loss\":null,\"perplexity\":null"), std::string::npos) << text;
  const auto back = read_measures(dir / "measures.json", 8, {"moby_dick", "sotu"});
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(std::isnan(back->validation.at("moby_dick").loss));
  EXPECT_TRUE(std::isnan(back->validation.at("moby_dick").perplexity));
  EXPECT_EQ(back->validation.at("sotu").loss, 1.0 / 3.0);

  DistilledModel student;
  student.k = 1;
  student.layers = {0};
  student.fraction = 0.5;
  student.named = true;
  student.measures = m;
  write_distill_report(dir.path(), sample(), {student});
  const std::string report = read_file(dir / "distill.json");
  EXPECT_NE(report.find("\"moby_dick\": {\"loss\": null, \"ppl\": null, \"teacher_loss\": "), std::string::npos)
      << report;
  EXPECT_EQ(report.find("nan"), std::string::npos) << report;
}
