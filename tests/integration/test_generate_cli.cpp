// fathom generate end to end: a run trained by the trainer generates from its folder, greedy output is
// reproducible and streams after the prompt, and bad invocations are clear errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "train/recipe.h"
#include "train/trainer.h"
#include "../unit/test_support.h"
#include "cli_test_helpers.h"

namespace fs = std::filesystem;
using fathom::testing::read_bytes;
using fathom::testing::run_fathom;

TEST(GenerateCli, GeneratesFromARunFolderAndRefusesBadInput) {
  fathom::testing::ScratchFolder dir;
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/train/sotu_2009-2019.txt";
  const fathom::Recipe recipe = fathom::parse_recipe(
      "model: {d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1, ffn_hidden: 64, vocab_size: 257}\n"
      "moda: {variant: attn_kv+ffn_kv}\n"
      "data: {tokenizer: bytes, train: [" + corpus + "]}\n"
      "train: {device: cpu, threads: 2, batch_size: 2, seq_len: 32, steps: 3, optimizer: {lr: 1.0e-3}}\n"
      "log: {dir: " + (dir / "run").string() + "}\n",
      "tiny.yaml");
  fathom::RunOptions quiet;
  quiet.quiet = true;
  fathom::run_training(recipe, quiet);

  const std::string run = (dir / "run").string();
  ASSERT_EQ(run_fathom(dir, "generate --checkpoint " + run + " --prompt 'The Union' --max-new-tokens 12 "
                            "--temperature 0 --ignore-eos --device cpu"), 0) << read_bytes(dir / "err.txt");
  const std::string first = read_bytes(dir / "out.txt");
  EXPECT_EQ(first.rfind("The Union", 0), 0u) << first;  // the prompt, then the continuation
  EXPECT_GT(first.size(), std::string("The Union\n").size());
  EXPECT_NE(read_bytes(dir / "err.txt").find("bytes per position"), std::string::npos);
  ASSERT_EQ(run_fathom(dir, "generate --checkpoint " + run + " --prompt 'The Union' --max-new-tokens 12 "
                            "--temperature 0 --ignore-eos --device cpu"), 0);
  EXPECT_EQ(read_bytes(dir / "out.txt"), first);  // greedy is reproducible

  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + run + " --max-new-tokens 4"), 1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("--prompt"), std::string::npos) << read_bytes(dir / "err.txt");
  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + run + " --prompt x --top-p 0"), 1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("--top-p must be in (0, 1]"), std::string::npos);
  // Caches larger than the host's memory are refused before anything is allocated.
  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + run + " --prompt x --max-new-tokens 1000000000000 --batch 64 "
                            "--device cpu"), 1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("lower --batch or --max-new-tokens"), std::string::npos)
      << read_bytes(dir / "err.txt");
  EXPECT_EQ(run_fathom(dir, "generate --checkpoint " + (dir / "missing").string() + " --prompt x"), 1);
  EXPECT_NE(read_bytes(dir / "err.txt").find("fathom: error:"), std::string::npos);
}

// A hybrid with a dsla layer trains, checkpoints and generates through the binary, and generate says
// what its constant state holds against the KV cache it saves.
TEST(GenerateCli, DslaLayersKeepAConstantStateInsteadOfAKvCache) {
  fathom::testing::ScratchFolder dir;
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/train/sotu_2009-2019.txt";
  const std::string recipe = (dir / "hybrid.yaml").string();
  fathom::testing::write_bytes(recipe,
      "model: {d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1, ffn_hidden: 64, vocab_size: 257, "
      "layers: [attention, dsla]}\n"
      "data: {tokenizer: bytes, train: [" + corpus + "]}\n"
      "train: {device: cpu, threads: 2, batch_size: 2, seq_len: 32, steps: 3, optimizer: {lr: 1.0e-3}}\n"
      "log: {dir: " + (dir / "run").string() + "}\n");
  ASSERT_EQ(run_fathom(dir, "train " + recipe), 0) << read_bytes(dir / "err.txt");
  ASSERT_EQ(run_fathom(dir, "generate --checkpoint " + (dir / "run").string() + " --prompt 'The Union' "
                            "--max-new-tokens 6 --temperature 0 --ignore-eos --device cpu"), 0)
      << read_bytes(dir / "err.txt");
  EXPECT_EQ(read_bytes(dir / "out.txt").rfind("The Union", 0), 0u);
  // One attention layer: K and V of 1 head x 16, f32 = 128 bytes per position; the dsla layer's two
  // fp32 states [2 heads, 16, 16] = 4 KiB, in place of 128 KiB of KV cache per 1K tokens.
  const std::string err = read_bytes(dir / "err.txt");
  EXPECT_NE(err.find("(128 bytes per position and sequence)"), std::string::npos) << err;
  EXPECT_NE(err.find("1 dsla layer keeps 4.0 KiB of constant state per sequence instead of a KV cache of 128.0 KiB "
                     "per 1K tokens"), std::string::npos) << err;
}
