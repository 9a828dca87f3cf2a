// fathom generate end to end: a run trained by the trainer generates from its folder, greedy output is
// reproducible and streams after the prompt, and bad invocations are clear errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_test_helpers.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/test_support.h"
#include "train/recipe/recipe.h"
#include "train/run/trainer.h"

namespace fs = std::filesystem;
using fathom::testing::read_bytes;
using fathom::testing::run_fathom;

TEST(GenerateCli, GeneratesFromARunFolderAndRefusesBadInput) {
  fathom::testing::ScratchFolder dir;
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/train/sotu_2009-2019.txt";
  const fathom::Recipe recipe = fathom::parse_recipe(
      "model: {d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1, ffn_hidden: 64, vocab_size: 257}\n"
      "moda: {variant: attn_kv+ffn_kv}\n"
      "data: {tokenizer: bytes, train: [" +
          corpus +
          "]}\n"
          "train: {device: cpu, threads: 2, batch_size: 2, seq_len: 32, steps: 3, optimizer: {lr: 1.0e-3}}\n"
          "log: {dir: " +
          (dir / "run").string() + "}\n",
      "tiny.yaml");
  fathom::RunOptions quiet;
  quiet.quiet = true;
  fathom::run_training(recipe, quiet);

  const std::string run = (dir / "run").string();
  ASSERT_EQ(run_fathom(dir, "generate --checkpoint " + run +
                                " --prompt 'The Union' --max-new-tokens 12 "
                                "--temperature 0 --ignore-eos --device cpu"),
            0)
      << read_bytes(dir / "err.txt");
  const std::string first = read_bytes(dir / "out.txt");
  EXPECT_EQ(first.rfind("The Union", 0), 0u) << first;  // the prompt, then the continuation
  EXPECT_GT(first.size(), std::string("The Union\n").size());
  EXPECT_NE(read_bytes(dir / "err.txt").find("bytes per position"), std::string::npos);
  ASSERT_EQ(run_fathom(dir, "generate --checkpoint " + run +
                                " --prompt 'The Union' --max-new-tokens 12 "
                                "--temperature 0 --ignore-eos --device cpu"),
            0);
  EXPECT_EQ(read_bytes(dir / "out.txt"), first);  // greedy is reproducible

  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + run + " --max-new-tokens 4"), 1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("--prompt"), std::string::npos) << read_bytes(dir / "err.txt");
  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + run + " --prompt x --top-p 0"), 1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("--top-p must be in (0, 1]"), std::string::npos);
  // Caches larger than the host's memory are refused before anything is allocated.
  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + run +
                                " --prompt x --max-new-tokens 16000000 --batch 65536 "
                                "--device cpu"),
            1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("lower --batch or --max-new-tokens"), std::string::npos)
      << read_bytes(dir / "err.txt");
  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + (dir / "missing").string() + " --prompt x"), 1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("fathom: error:"), std::string::npos);
}

// Each decoding flag is checked against its range before anything is read, and the error names the
// flag and the range: no value wraps (--seed -1), overflows a sum or reaches the thread library.
TEST(GenerateCli, FlagsOutsideTheirRangesAreErrorsNamingTheFlag) {
  fathom::testing::ScratchFolder dir;
  const std::string start = "generate --checkpoint " + (dir / "no-such-run").string() + " --prompt x ";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"--threads 100000", "--threads: Value 100000 not in range 0 to 1024"},
      {"--threads -1", "--threads: Value -1 not in range 0 to 1024"},
      {"--batch 0", "--batch: Value 0 not in range 1 to 65536"},
      {"--batch -2", "--batch: Value -2 not in range 1 to 65536"},
      {"--max-new-tokens -5", "--max-new-tokens: Value -5 not in range 1 to 16777216"},
      {"--max-new-tokens 9223372036854775807", "--max-new-tokens: Value 9223372036854775807 not in range"},
      {"--seed -1", "--seed: Value -1 is not a whole number of 0 or more"},
  };
  for (const auto& [flag, message] : cases) {
    EXPECT_NE(run_fathom(dir, start + flag), 0) << flag;
    const std::string err = read_bytes(dir / "err.txt");
    EXPECT_NE(err.find(message), std::string::npos) << flag << ": " << err;
    EXPECT_EQ(err.find("no-such-run"), std::string::npos) << flag << ": checked after the checkpoint: " << err;
  }
}

// --device cuda on a machine without a GPU names the flag, not a recipe key.
TEST(GenerateCli, DeviceCudaWithoutAGpuNamesTheFlag) {
  if (fathom::test::gpu_present()) GTEST_SKIP() << "a GPU is present";
  fathom::testing::ScratchFolder dir;
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/train/sotu_2009-2019.txt";
  const std::string recipe = (dir / "tiny.yaml").string();
  fathom::testing::write_bytes(
      recipe,
      "model: {d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1, ffn_hidden: 64, vocab_size: 257}\n"
      "data: {tokenizer: bytes, train: [" +
          corpus +
          "]}\n"
          "train: {device: cpu, threads: 1, batch_size: 1, seq_len: 16, steps: 1, optimizer: {lr: 1.0e-3}}\n"
          "log: {dir: " +
          (dir / "run").string() + "}\n");
  ASSERT_EQ(run_fathom(dir, "train " + recipe), 0) << read_bytes(dir / "err.txt");
  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + (dir / "run").string() + " --prompt x --device cuda"), 1);
  const std::string err = read_bytes(dir / "err.txt");
  EXPECT_NE(err.find("--device asks for cuda, but no GPU is usable here"), std::string::npos) << err;
  EXPECT_EQ(err.find("train.device"), std::string::npos) << err;
}

// A hybrid with a dsla layer trains, checkpoints and generates through the binary, and generate says
// what its constant state holds against the KV cache it saves.
TEST(GenerateCli, DslaLayersKeepAConstantStateInsteadOfAKvCache) {
  fathom::testing::ScratchFolder dir;
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/train/sotu_2009-2019.txt";
  const std::string recipe = (dir / "hybrid.yaml").string();
  fathom::testing::write_bytes(
      recipe,
      "model: {d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1, ffn_hidden: 64, vocab_size: 257, "
      "layers: [attention, dsla]}\n"
      "data: {tokenizer: bytes, train: [" +
          corpus +
          "]}\n"
          "train: {device: cpu, threads: 2, batch_size: 2, seq_len: 32, steps: 3, optimizer: {lr: 1.0e-3}}\n"
          "log: {dir: " +
          (dir / "run").string() + "}\n");
  ASSERT_EQ(run_fathom(dir, "train " + recipe), 0) << read_bytes(dir / "err.txt");
  ASSERT_EQ(run_fathom(dir, "generate --checkpoint " + (dir / "run").string() +
                                " --prompt 'The Union' "
                                "--max-new-tokens 6 --temperature 0 --ignore-eos --device cpu"),
            0)
      << read_bytes(dir / "err.txt");
  EXPECT_EQ(read_bytes(dir / "out.txt").rfind("The Union", 0), 0u);
  // One attention layer: K and V of 1 head x 16, f32 = 128 bytes per position; the dsla layer's two
  // fp32 states [2 heads, 16, 16] = 4 KiB, in place of 128,000 bytes (125 KiB) of KV cache per 1,000 tokens.
  const std::string err = read_bytes(dir / "err.txt");
  EXPECT_NE(err.find("(128 bytes per position and sequence)"), std::string::npos) << err;
  EXPECT_NE(err.find("1 dsla layer keeps 4.0 KiB of constant state per sequence instead of a KV cache of 125.0 KiB "
                     "per 1,000 tokens"),
            std::string::npos)
      << err;
}

// --prompts FILE: one prompt per line decoded as one batch, each continuation under its header in line
// order and equal to the prompt generated alone; --batch gives each prompt that many samples; a missing
// or empty file, a blank line, --prompt alongside, and caches too large for the longest prompt are
// errors that name the file, the line or the flags.
TEST(GenerateCli, PromptsFileDecodesEachLineAsOneBatch) {
  fathom::testing::ScratchFolder dir;
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/train/sotu_2009-2019.txt";
  const std::string recipe = (dir / "tiny.yaml").string();
  fathom::testing::write_bytes(
      recipe,
      "model: {d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1, ffn_hidden: 64, vocab_size: 257}\n"
      "data: {tokenizer: bytes, train: [" +
          corpus +
          "]}\n"
          "train: {device: cpu, threads: 1, batch_size: 1, seq_len: 16, steps: 2, optimizer: {lr: 1.0e-3}}\n"
          "log: {dir: " +
          (dir / "run").string() + "}\n");
  ASSERT_EQ(run_fathom(dir, "train " + recipe), 0) << read_bytes(dir / "err.txt");
  const std::string run = " --checkpoint " + (dir / "run").string();
  const std::string flags = " --max-new-tokens 10 --temperature 0 --ignore-eos --device cpu";
  const std::vector<std::string> prompts{"The Union", "A", "We the people of"};
  const std::string file = (dir / "prompts.txt").string();
  fathom::testing::write_bytes(file, prompts[0] + "\n" + prompts[1] + "\r\n" + prompts[2] + "\n");
  ASSERT_EQ(run_fathom(dir, "generate" + run + " --prompts " + file + flags), 0) << read_bytes(dir / "err.txt");
  const std::string batch = read_bytes(dir / "out.txt");
  EXPECT_NE(read_bytes(dir / "err.txt").find("3 prompts of 26 tokens (longest 16)"), std::string::npos)
      << read_bytes(dir / "err.txt");
  std::string expected;
  for (size_t p = 0; p < prompts.size(); ++p) {
    ASSERT_EQ(run_fathom(dir, "generate" + run + " --prompt '" + prompts[p] + "'" + flags), 0);
    expected += "=== prompt " + std::to_string(p + 1) + " ===\n" + read_bytes(dir / "out.txt");
  }
  EXPECT_EQ(batch, expected);
  ASSERT_EQ(run_fathom(dir, "generate" + run + " --prompts " + file + " --batch 2" + flags), 0);
  const std::string samples = read_bytes(dir / "out.txt");
  const size_t first = samples.find("=== prompt 1, sample 1 ===\n"),
               last = samples.find("=== prompt 3, sample 2 ===\n");
  EXPECT_TRUE(first == 0 && last != std::string::npos && last > samples.find("=== prompt 2, sample 2 ===")) << samples;

  auto refused = [&](const std::string& arguments, const std::string& message) {
    EXPECT_NE(run_fathom(dir, "generate" + run + " " + arguments), 0) << arguments;
    const std::string err = read_bytes(dir / "err.txt");
    EXPECT_NE(err.find(message), std::string::npos) << arguments << ": " << err;
  };
  refused("--prompts " + (dir / "missing.txt").string(), "--prompts: File does not exist");
  const std::string empty = (dir / "empty.txt").string(), blank = (dir / "blank.txt").string();
  fathom::testing::write_bytes(empty, "");
  fathom::testing::write_bytes(blank, "one\n\nthree\n");
  refused("--prompts " + empty, "--prompts " + empty + " holds no prompts");
  refused("--prompts " + blank, "--prompts " + blank + ": line 2 is empty");
  refused("--prompts " + file + " --prompt x", "excludes");
  refused("--prompts " + file + " --max-new-tokens 16000000 --batch 65536 --device cpu",
          "the longest prompt, line 3 of " + file + ", 16 tokens");
}
