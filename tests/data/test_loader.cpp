#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "data/eval_iterator.h"
#include "data/loader.h"
#include "data/permutation.h"
#include "data/shard.h"
#include "data/text.h"
#include "data/token_source.h"
#include "data/tokenizer.h"
#include "tests/support/data_test_helpers.h"

using namespace fathom;
using fathom::testing::error_of;
using fathom::testing::random_tokens;
using fathom::testing::ScratchFolder;

namespace {

// Distinct tokens in random order, so any token identifies its position in the stream.
std::vector<uint32_t> distinct_tokens(size_t count, uint32_t seed) {
  std::vector<uint32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), 0u);
  std::shuffle(tokens.begin(), tokens.end(), std::mt19937(seed));
  return tokens;
}

std::shared_ptr<const TokenSource> vector_source(std::vector<uint32_t> tokens, uint32_t vocab) {
  return std::make_shared<VectorTokenSource>(std::move(tokens), vocab);
}

bool same_batch(const TokenBatch& a, const TokenBatch& b) {
  return a.inputs.shape() == b.inputs.shape() && a.inputs.to_vector<int32_t>() == b.inputs.to_vector<int32_t>() &&
         a.targets.to_vector<int32_t>() == b.targets.to_vector<int32_t>();
}

// The window index of every row of a batch (from its first input token's position).
std::vector<uint64_t> window_indices(const TokenBatch& batch, const std::vector<uint64_t>& position_of,
                                     int64_t seq_len) {
  std::vector<uint64_t> windows;
  const std::vector<int32_t> inputs = batch.inputs.to_vector<int32_t>();
  for (int64_t r = 0; r < batch.inputs.dim(0); ++r) {
    const uint64_t position = position_of[size_t(inputs[size_t(r * seq_len)])];
    EXPECT_EQ(position % uint64_t(seq_len), 0u) << "windows start at multiples of T";
    windows.push_back(position / uint64_t(seq_len));
  }
  return windows;
}

std::vector<uint64_t> inverse(const std::vector<uint32_t>& tokens) {
  std::vector<uint64_t> position_of(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) position_of[tokens[i]] = i;
  return position_of;
}

}  // namespace

TEST(Permutation, IsAPermutationAndPlatformStable) {
  // Reference values from an independent Philox4x32-10 Fisher-Yates; any change would silently
  // change the data order of resumed runs.
  EXPECT_EQ(shuffled_indices(10, 1234, 0), (std::vector<uint64_t>{5, 7, 2, 9, 6, 8, 4, 3, 1, 0}));
  EXPECT_EQ(shuffled_indices(10, 1234, 1), (std::vector<uint64_t>{1, 7, 9, 4, 8, 2, 0, 5, 3, 6}));
  EXPECT_EQ(shuffled_indices(12, 0x123456789abcdefULL, 7),
            (std::vector<uint64_t>{2, 10, 7, 3, 11, 9, 5, 1, 6, 4, 0, 8}));
  std::vector<uint64_t> order = shuffled_indices(1000, 99, 3);
  std::sort(order.begin(), order.end());
  std::vector<uint64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), uint64_t(0));
  EXPECT_EQ(order, identity);
  EXPECT_TRUE(shuffled_indices(0, 1, 0).empty());
  EXPECT_EQ(shuffled_indices(1, 1, 0), std::vector<uint64_t>{0});
}

TEST(TokenLoader, TargetsAreInputsShiftedByOne) {
  const int64_t B = 4, T = 16;
  const std::vector<uint32_t> tokens = distinct_tokens(1000, 31);
  const std::vector<uint64_t> position_of = inverse(tokens);
  TokenLoader loader(vector_source(tokens, 1000), B, T, 7);
  EXPECT_EQ(loader.samples_per_epoch(), (1000u - 1) / 16);
  for (int step = 0; step < 5; ++step) {
    const TokenBatch batch = loader.next_batch();
    ASSERT_EQ(batch.inputs.shape(), Shape({B, T}));
    ASSERT_EQ(batch.targets.shape(), Shape({B, T}));
    ASSERT_EQ(batch.inputs.dtype(), DType::i32);
    const std::vector<int32_t> in = batch.inputs.to_vector<int32_t>();
    const std::vector<int32_t> tg = batch.targets.to_vector<int32_t>();
    const std::vector<uint64_t> windows = window_indices(batch, position_of, T);
    for (int64_t r = 0; r < B; ++r) {
      const size_t start = size_t(windows[size_t(r)] * T);
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(uint32_t(in[size_t(r * T + t)]), tokens[start + size_t(t)]);
        EXPECT_EQ(uint32_t(tg[size_t(r * T + t)]), tokens[start + size_t(t) + 1]);
      }
    }
  }
}

TEST(TokenLoader, SameSeedSameBatchesOtherSeedOtherBatches) {
  const std::vector<uint32_t> tokens = random_tokens(3000, 257, 32);
  TokenLoader a(vector_source(tokens, 257), 3, 32, 1234);
  TokenLoader b(vector_source(tokens, 257), 3, 32, 1234);
  TokenLoader c(vector_source(tokens, 257), 3, 32, 1235);
  int differing = 0;
  for (int step = 0; step < 70; ++step) {  // about 2.2 epochs of 93 samples
    const TokenBatch x = a.next_batch();
    EXPECT_TRUE(same_batch(x, b.next_batch())) << "step " << step;
    differing += same_batch(x, c.next_batch()) ? 0 : 1;
  }
  EXPECT_GT(differing, 60);
  EXPECT_EQ(a.state(), b.state());
}

TEST(TokenLoader, EverySampleOncePerEpoch) {
  const int64_t B = 5, T = 8;
  const std::vector<uint32_t> tokens = distinct_tokens(8 * 125 + 1, 33);  // exactly 125 windows
  const std::vector<uint64_t> position_of = inverse(tokens);
  TokenLoader loader(vector_source(tokens, uint32_t(tokens.size())), B, T, 5);
  ASSERT_EQ(loader.samples_per_epoch(), 125u);
  std::vector<uint64_t> previous_order;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<uint64_t> order;
    for (int step = 0; step < 25; ++step) {
      const std::vector<uint64_t> w = window_indices(loader.next_batch(), position_of, T);
      order.insert(order.end(), w.begin(), w.end());
    }
    EXPECT_EQ(loader.state(), (LoaderState{epoch, 125}));
    std::set<uint64_t> seen(order.begin(), order.end());
    EXPECT_EQ(seen.size(), 125u) << "a window repeated within epoch " << epoch;
    EXPECT_EQ(*seen.rbegin(), 124u);
    EXPECT_NE(order, previous_order) << "each epoch has its own order";
    previous_order = order;
  }
}

TEST(TokenLoader, BatchesSpanEpochBoundaries) {
  const int64_t B = 4, T = 10;
  const std::vector<uint32_t> tokens = distinct_tokens(10 * 7 + 1, 34);  // 7 windows, B does not divide
  const std::vector<uint64_t> position_of = inverse(tokens);
  TokenLoader loader(vector_source(tokens, uint32_t(tokens.size())), B, T, 9);
  std::vector<uint64_t> order;
  for (int step = 0; step < 7; ++step) {  // 28 samples = 4 whole epochs
    const std::vector<uint64_t> w = window_indices(loader.next_batch(), position_of, T);
    order.insert(order.end(), w.begin(), w.end());
  }
  EXPECT_EQ(loader.state(), (LoaderState{3, 7}));
  for (size_t epoch = 0; epoch < 4; ++epoch) {
    std::set<uint64_t> seen(order.begin() + 7 * epoch, order.begin() + 7 * (epoch + 1));
    EXPECT_EQ(seen.size(), 7u);
    EXPECT_EQ(std::vector<uint64_t>(order.begin() + 7 * epoch, order.begin() + 7 * (epoch + 1)),
              shuffled_indices(7, 9, epoch));
  }
}

TEST(TokenLoader, ResumeReproducesTheNextBatchesBitForBit) {
  const std::vector<uint32_t> tokens = random_tokens(5000, 50257, 35);
  auto source = vector_source(tokens, 50257);
  for (int saved_after : {0, 3, 19, 40}) {  // 19 batches of 7 crosses the end of epoch 0 (124 samples)
    TokenLoader original(source, 7, 40, 2024);
    for (int i = 0; i < saved_after; ++i) original.next_batch();
    const LoaderState saved = original.state();

    TokenLoader resumed(source, 7, 40, 2024);
    for (int i = 0; i < 5; ++i) resumed.next_batch();  // wherever it was, restore must win
    resumed.restore(saved);
    EXPECT_EQ(resumed.state(), saved);
    for (int i = 0; i < 30; ++i) {
      ASSERT_TRUE(same_batch(original.next_batch(), resumed.next_batch()))
          << "saved after " << saved_after << " batches, diverged at batch " << i;
    }
  }
}

TEST(TokenLoader, RestoreAtTheEndOfAnEpochContinuesWithTheNext) {
  const std::vector<uint32_t> tokens = random_tokens(641, 257, 36);  // 10 windows of 64
  auto source = vector_source(tokens, 257);
  TokenLoader a(source, 5, 64, 3);
  a.next_batch();
  a.next_batch();
  EXPECT_EQ(a.state(), (LoaderState{0, 10}));
  TokenLoader b(source, 5, 64, 3);
  b.restore({0, 10});
  EXPECT_TRUE(same_batch(a.next_batch(), b.next_batch()));
  EXPECT_EQ(b.state(), (LoaderState{1, 5}));
}

TEST(TokenLoader, BadArgumentsAreClearErrors) {
  auto source = vector_source(random_tokens(100, 257, 37), 257);
  std::string message = error_of([&] { TokenLoader(source, 2, 100, 1); });
  EXPECT_NE(message.find("T = 100"), std::string::npos) << message;
  EXPECT_NE(message.find("100 tokens"), std::string::npos) << message;
  EXPECT_NO_THROW(TokenLoader(source, 2, 99, 1));  // exactly T + 1 tokens: one sample
  EXPECT_THROW(TokenLoader(source, 0, 8, 1), Error);
  EXPECT_THROW(TokenLoader(source, 2, 0, 1), Error);
  EXPECT_THROW(TokenLoader(nullptr, 2, 8, 1), Error);
  TokenLoader loader(source, 2, 8, 1);  // 12 windows
  message = error_of([&] { loader.restore({0, 13}); });
  EXPECT_NE(message.find("13"), std::string::npos) << message;
  EXPECT_THROW(VectorTokenSource(random_tokens(10, 300, 38), 257), Error);
}

TEST(TokenLoader, ShardsReadAsOneStream) {
  ScratchFolder dir;
  const std::vector<uint32_t> tokens = random_tokens(2500, 70000, 39);  // uint32 shards
  const std::vector<size_t> cuts = {0, 700, 700, 1900, 2500};           // includes an empty shard
  std::vector<std::string> paths;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    paths.push_back(dir.file("part" + std::to_string(i) + ".bin"));
    write_shard(paths.back(), std::span(tokens).subspan(cuts[i], cuts[i + 1] - cuts[i]), 70000);
  }
  auto shards = std::make_shared<ShardTokenSource>(paths);
  EXPECT_EQ(shards->size(), tokens.size());
  std::vector<uint32_t> across(400);
  shards->read(600, across);  // spans the first, empty and third shards
  EXPECT_EQ(across, std::vector<uint32_t>(tokens.begin() + 600, tokens.begin() + 1000));
  EXPECT_THROW(shards->read(2200, across), Error);
  EXPECT_THROW(VectorTokenSource(tokens, 70000).read(2200, across), Error);

  TokenLoader from_shards(shards, 4, 50, 77);
  TokenLoader from_memory(vector_source(tokens, 70000), 4, 50, 77);
  for (int i = 0; i < 15; ++i) EXPECT_TRUE(same_batch(from_shards.next_batch(), from_memory.next_batch()));

  write_shard(dir.file("other.bin"), random_tokens(100, 257, 40), 257);
  paths.push_back(dir.file("other.bin"));
  const std::string message = error_of([&] { ShardTokenSource{paths}; });
  EXPECT_NE(message.find("other.bin"), std::string::npos) << message;
  EXPECT_THROW(ShardTokenSource{std::vector<std::string>{}}, Error);
}

TEST(EvalIterator, AllFullWindowsInOrder) {
  const int64_t B = 4, T = 12;
  const std::vector<uint32_t> tokens = random_tokens(12 * 10 + 5, 257, 41);  // 10 windows
  EvalIterator it(vector_source(tokens, 257), B, T);
  EXPECT_EQ(it.num_windows(), 10u);
  EXPECT_EQ(it.num_batches(), 3);
  std::vector<int32_t> inputs, targets;
  int batches = 0;
  while (std::optional<TokenBatch> batch = it.next()) {
    EXPECT_EQ(batch->inputs.dim(0), batches < 2 ? 4 : 2) << "the last batch holds the rest";
    const std::vector<int32_t> in = batch->inputs.to_vector<int32_t>();
    const std::vector<int32_t> tg = batch->targets.to_vector<int32_t>();
    inputs.insert(inputs.end(), in.begin(), in.end());
    targets.insert(targets.end(), tg.begin(), tg.end());
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  ASSERT_EQ(inputs.size(), 120u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(uint32_t(inputs[i]), tokens[i]);
    EXPECT_EQ(uint32_t(targets[i]), tokens[i + 1]);
  }
  EXPECT_FALSE(it.next().has_value());
  it.reset();
  ASSERT_TRUE(it.next().has_value());
}

TEST(EvalIterator, CappedAtMaxBatches) {
  const std::vector<uint32_t> tokens = random_tokens(1001, 257, 42);
  auto source = vector_source(tokens, 257);
  EvalIterator capped(source, 3, 10, 2);
  EXPECT_EQ(capped.num_windows(), 6u);
  EvalIterator full(source, 3, 10);
  for (int i = 0; i < 2; ++i) {
    std::optional<TokenBatch> a = capped.next();
    ASSERT_TRUE(a.has_value());
    EXPECT_TRUE(same_batch(*a, *full.next()));
  }
  EXPECT_FALSE(capped.next().has_value());
  EXPECT_EQ(EvalIterator(source, 3, 10, 1000).num_windows(), 100u);  // a cap beyond the data
  EXPECT_THROW(EvalIterator(source, 3, 10, 0), Error);
  EXPECT_THROW(EvalIterator(source, 0, 10), Error);
  const std::string message = error_of([&] { EvalIterator(source, 3, 1001); });
  EXPECT_NE(message.find("T = 1001"), std::string::npos) << message;
}

TEST(EvalIterator, SkipPassesOverABatchWithoutChangingTheOthers) {
  const std::vector<uint32_t> tokens = random_tokens(1001, 257, 42);
  auto source = vector_source(tokens, 257);
  EvalIterator skipping(source, 3, 10, 5), full(source, 3, 10, 5);
  for (int b = 0; b < 5; ++b) {
    std::optional<TokenBatch> expected = full.next();
    if (b % 2 == 1) {
      EXPECT_TRUE(skipping.skip());
    } else {
      std::optional<TokenBatch> got = skipping.next();
      ASSERT_TRUE(got.has_value());
      EXPECT_TRUE(same_batch(*got, *expected)) << "batch " << b;
    }
  }
  EXPECT_FALSE(skipping.skip());
  EXPECT_FALSE(skipping.next().has_value());
}

TEST(QuickstartCorpus, TokenizedIntoAShardTheLoaderReads) {
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart/validation/moby_dick.txt";
  const std::unique_ptr<Tokenizer> tok = make_tokenizer("bytes");
  const std::vector<uint32_t> tokens = tokenize_text_files({corpus}, DocumentSplit::whole_file, *tok);
  ScratchFolder dir;
  write_shard(dir.file("val.bin"), tokens, tok->vocab_size());
  auto source = std::make_shared<ShardTokenSource>(std::vector<std::string>{dir.file("val.bin")});
  ASSERT_EQ(source->size(), tokens.size());

  const std::string text = tok->decode(tokens);
  TokenLoader loader(source, 2, 256, 11);
  const TokenBatch batch = loader.next_batch();
  const std::vector<int32_t> in = batch.inputs.to_vector<int32_t>();
  for (int r = 0; r < 2; ++r) {
    const std::vector<uint32_t> row(in.begin() + r * 256, in.begin() + (r + 1) * 256);
    EXPECT_NE(text.find(tok->decode(row)), std::string::npos) << "a batch row is a slice of the book";
  }
}
