// bench/bench_generate end to end on the CPU with a tiny HF Llama (tests/fixtures/hf/llama_tied): one row per
// context and batch with the roofline columns, the bytes of train/measure/decode_traffic.h, the greedy ids
// written per row, and clear errors for bad flags.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "layers/hf_import.h"
#include "tests/support/test_support.h"
#include "train/measure/decode_traffic.h"

using fathom::testing::read_bytes;
using fathom::testing::ScratchFolder;

namespace {

const std::string kModel = std::string(FATHOM_SOURCE_DIR) + "/tests/fixtures/hf/llama_tied";

int run_bench(const ScratchFolder& dir, const std::string& arguments) {
  const std::string command = std::string(FATHOM_BENCH_GENERATE) + " " + arguments + " > " +
                              (dir / "out.txt").string() + " 2> " + (dir / "err.txt").string();
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A markdown row's cells, trimmed.
std::vector<std::string> cells_of(const std::string& row) {
  std::vector<std::string> cells;
  std::istringstream in(row.substr(1));
  for (std::string cell; std::getline(in, cell, '|');) {
    const size_t begin = cell.find_first_not_of(' '), end = cell.find_last_not_of(' ');
    cells.push_back(begin == std::string::npos ? "" : cell.substr(begin, end - begin + 1));
  }
  return cells;
}

}  // namespace

TEST(BenchGenerate, PrintsARooflineRowAndTheGreedyIdsPerContextAndBatch) {
  ScratchFolder dir;
  const std::string tokens = (dir / "tokens.txt").string();
  ASSERT_EQ(run_bench(dir, "hf:" + kModel +
                               " --context 8,20 --batch 1,3 --new-tokens 6 --warmup 0 --repeats 1 --copy-mib 8 "
                               "--tokens-out " +
                               tokens),
            0)
      << read_bytes(dir / "err.txt");
  EXPECT_NE(read_bytes(dir / "err.txt").find("copy bandwidth"), std::string::npos);
  EXPECT_NE(read_bytes(dir / "err.txt").find("host memcpy of 8 MiB"), std::string::npos);

  const std::vector<std::string> rows = lines_of(read_bytes(dir / "out.txt"));
  ASSERT_EQ(rows.size(), 4u) << read_bytes(dir / "out.txt");
  const fathom::ModelConfig config = fathom::read_hf_config(kModel).config;
  size_t row = 0;
  for (const int64_t context : {8, 20})
    for (const int64_t batch : {1, 3}) {
      const std::vector<std::string> c = cells_of(rows[row++]);
      ASSERT_EQ(c.size(), 12u) << rows[row - 1];
      EXPECT_EQ(c[0], "fathom generate");
      EXPECT_EQ(c[1], "llama_tied");
      EXPECT_EQ(c[2], std::to_string(batch));
      EXPECT_EQ(c[3], std::to_string(context));
      EXPECT_EQ(c[4], "6");
      // The CPU computes in f32; the steps attend to context + 3 positions on average.
      const auto traffic = fathom::decode_step_traffic(config, fathom::DType::f32, fathom::DType::f32,
                                                       fathom::DType::f32, batch, context + 3);
      EXPECT_NEAR(std::stod(c[8]), double(traffic.total()) / 1e6, 1e-3) << rows[row - 1];
      // GB/s = bytes / step time; % of roofline = that / the copy bandwidth.
      const double step_s = std::stod(c[6]) / 1e3, rate = std::stod(c[9]), copy = std::stod(c[10]);
      EXPECT_GT(step_s, 0);
      EXPECT_GT(copy, 0);
      // The printed figures are rounded (ms/step to 0.001, GB/s and % to 0.1): the relations hold to
      // that rounding, whatever the step time (a loaded machine makes a step slow and its GB/s small).
      const double step_error = 0.5e-6 / step_s, copy_error = 0.05 / copy;  // relative
      const double true_rate = double(traffic.total()) / step_s / 1e9, true_percent = 100 * true_rate / copy;
      EXPECT_NEAR(rate, true_rate, 0.05 + 1.1 * step_error * true_rate + 1e-9) << rows[row - 1];
      EXPECT_NEAR(std::stod(c[11]), true_percent, 0.05 + 1.1 * (step_error + copy_error) * true_percent + 1e-9)
          << rows[row - 1];
    }

  // "C B id x 6" per row; one prompt for every sequence, so the batch sizes agree.
  const std::vector<std::string> id_lines = lines_of(read_bytes(tokens));
  ASSERT_EQ(id_lines.size(), 4u);
  std::vector<std::vector<int64_t>> ids;
  for (const std::string& line : id_lines) {
    std::istringstream in(line);
    std::vector<int64_t> values;
    for (int64_t v; in >> v;) values.push_back(v);
    ASSERT_EQ(values.size(), 8u) << line;
    for (size_t i = 2; i < values.size(); ++i) EXPECT_LT(values[i], config.vocab_size);
    ids.push_back(values);
  }
  EXPECT_EQ(ids[0][0], 8);
  EXPECT_EQ(ids[0][1], 1);
  EXPECT_EQ(ids[3][0], 20);
  EXPECT_EQ(ids[3][1], 3);
  EXPECT_EQ(std::vector<int64_t>(ids[0].begin() + 2, ids[0].end()),
            std::vector<int64_t>(ids[1].begin() + 2, ids[1].end()));
  EXPECT_EQ(std::vector<int64_t>(ids[2].begin() + 2, ids[2].end()),
            std::vector<int64_t>(ids[3].begin() + 2, ids[3].end()));
}

TEST(BenchGenerate, RefusesBadFlagsAndMissingInputs) {
  ScratchFolder dir;
  const std::string model = "hf:" + kModel;
  EXPECT_NE(run_bench(dir, model + " --new-tokens 1"), 0);
  EXPECT_NE(read_bytes(dir / "err.txt").find("--new-tokens"), std::string::npos) << read_bytes(dir / "err.txt");
  EXPECT_NE(run_bench(dir, model + " --batch 1,0"), 0);
  EXPECT_NE(read_bytes(dir / "err.txt").find("--batch"), std::string::npos) << read_bytes(dir / "err.txt");
  EXPECT_NE(run_bench(dir, model + " --copy-mib 8 --ids " + (dir / "none.txt").string()), 0);
  EXPECT_NE(read_bytes(dir / "err.txt").find("--ids: cannot read"), std::string::npos) << read_bytes(dir / "err.txt");
  // Ids outside the model's vocabulary of 97.
  fathom::testing::write_bytes(dir / "ids.txt", "5 500\n");
  EXPECT_NE(run_bench(dir, model + " --copy-mib 8 --context 4 --ids " + (dir / "ids.txt").string()), 0);
  EXPECT_NE(read_bytes(dir / "err.txt").find("outside the model's vocabulary of 97"), std::string::npos)
      << read_bytes(dir / "err.txt");
}
