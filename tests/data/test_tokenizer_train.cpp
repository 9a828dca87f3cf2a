// BPE training: merges by pair frequency with the documented tie-break, incremental counts that
// match a recount, determinism, the written tokenizer.json loading back and round-tripping, bad
// input, the committed quickstart tokenizer, and the `fathom tokenizer` command line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <map>

#include "data/bpe_files.h"
#include "data/bpe_trainer.h"
#include "data/byte_level.h"
#include "tests/support/data_test_helpers.h"
#include "tests/support/tokenizer_test_helpers.h"

using namespace fathom;
using namespace fathom::testing;
using Ids = std::vector<uint32_t>;

namespace {

const std::string kCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";

std::vector<std::string> merged_tokens(const TrainedBpe& bpe) {
  return std::vector<std::string>(bpe.tokens.begin() + 256, bpe.tokens.end());
}

// The reference the incremental trainer must equal: recount every pair of every word before each
// merge, take the most frequent (ties: smaller left id, then smaller right id), rewrite all words.
TrainedBpe train_by_recounting(const std::unordered_map<std::string, uint64_t>& counts, size_t target) {
  TrainedBpe bpe;
  const auto& order = bytes_in_byte_level_order();
  uint32_t id_of_byte[256];
  for (uint32_t id = 0; id < 256; ++id) {
    bpe.tokens.emplace_back(1, char(order[id]));
    id_of_byte[order[id]] = id;
  }
  std::vector<std::pair<Ids, uint64_t>> words;
  for (const auto& [piece, count] : counts) {
    Ids symbols;
    for (char c : piece) symbols.push_back(id_of_byte[static_cast<unsigned char>(c)]);
    words.emplace_back(symbols, count);
  }
  while (bpe.tokens.size() < target) {
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> pairs;
    for (const auto& [s, count] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pairs[{s[i], s[i + 1]}] += count;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;  // std::map order gives the tie-break
    const auto [left, right] = best->first;
    const uint32_t merged = uint32_t(bpe.tokens.size());
    bpe.tokens.push_back(bpe.tokens[left] + bpe.tokens[right]);
    bpe.merges.push_back({left, right, merged});
    for (auto& [s, count] : words) {
      Ids out;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          out.push_back(merged);
          i += 2;
        } else {
          out.push_back(s[i++]);
        }
      }
      s = out;
    }
  }
  return bpe;
}

// Runs a shell command; returns its exit status and standard output.
std::pair<int, std::string> run(const std::string& command, const ScratchFolder& dir) {
  const std::string out = dir.file("stdout");
  const int status = std::system((command + " > " + out + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(out)};
}

}  // namespace

TEST(BpeTraining, MergesTheMostFrequentPairWithTheDocumentedTieBreak) {
  // Pair counts: h-e, e-l, l-l, l-o all 9 ("hello" x5 + " hello" x4). Ties go to the smaller left
  // id (ids follow GPT-2's byte order, so 'e' < 'h' < 'l'): "el", then "hel" (h < l < "el"), "lo",
  // "hello"; then " hello" (4) beats the count-3 pairs of " world", among which "ld" has the
  // smallest left id.
  const std::unordered_map<std::string, uint64_t> counts = {{"hello", 5}, {" world", 3}, {" hello", 4}};
  const TrainedBpe bpe = train_bpe(counts, 262);
  EXPECT_EQ(merged_tokens(bpe), (std::vector<std::string>{"el", "hel", "lo", "hello", " hello", "ld"}));
  ASSERT_EQ(bpe.merges.size(), 6u);
  EXPECT_EQ(bpe.tokens[bpe.merges[1].left], "h");
  EXPECT_EQ(bpe.tokens[bpe.merges[1].right], "el");
  // Overlapping pairs: "aaaa" holds (a, a) three times but merges into two "aa", then one "aaaa".
  EXPECT_EQ(merged_tokens(train_bpe({{"aaaa", 1}}, 300)), (std::vector<std::string>{"aa", "aaaa"}));
}

TEST(BpeTraining, IncrementalCountsEqualRecounting) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    std::unordered_map<std::string, uint64_t> counts;
    for (int w = 0; w < 150; ++w) {
      std::string word = rng() % 2 ? " " : "";
      const int length = 1 + int(rng() % 10);
      for (int i = 0; i < length; ++i) word += char('a' + rng() % 5);
      counts[word] += 1 + rng() % 20;
    }
    const TrainedBpe fast = train_bpe(counts, 256 + 120);
    const TrainedBpe slow = train_by_recounting(counts, 256 + 120);
    EXPECT_EQ(fast.tokens, slow.tokens) << "seed " << seed;
    ASSERT_EQ(fast.merges.size(), slow.merges.size());
    for (size_t i = 0; i < fast.merges.size(); ++i) {
      EXPECT_EQ(fast.merges[i].left, slow.merges[i].left);
      EXPECT_EQ(fast.merges[i].right, slow.merges[i].right);
    }
  }
}

TEST(BpeTraining, ResultDoesNotDependOnTheMapOrder) {
  std::mt19937 rng(3);
  std::vector<std::pair<std::string, uint64_t>> entries;
  for (int w = 0; w < 300; ++w) {
    std::string word;
    for (int i = 0, n = 2 + int(rng() % 8); i < n; ++i) word += char('a' + rng() % 6);
    entries.emplace_back(word, 1 + rng() % 4);
  }
  std::unordered_map<std::string, uint64_t> forward, backward(4096);
  for (const auto& [w, c] : entries) forward[w] += c;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) backward[it->first] += it->second;
  EXPECT_EQ(train_bpe(forward, 400).tokens, train_bpe(backward, 400).tokens);
}

TEST(BpeTraining, TrainedTokenizerRoundTripsAndIsDeterministic) {
  ScratchFolder dir;
  const std::vector<std::string> files = {kCorpus + "/train/sotu_2009-2019.txt"};
  const BpeTrainingReport report = train_bpe_tokenizer(files, 1000, dir.file("a/tokenizer.json"));
  EXPECT_EQ(report.vocab_size, 1000u);
  EXPECT_EQ(report.merges, 1000u - 257u);
  EXPECT_EQ(report.bytes, std::filesystem::file_size(files[0]));
  train_bpe_tokenizer(files, 1000, dir.file("b.json"));
  EXPECT_EQ(read_bytes(dir.file("a/tokenizer.json")), read_bytes(dir.file("b.json")));

  const std::unique_ptr<Tokenizer> tok = make_tokenizer(dir.file("a/tokenizer.json"));
  EXPECT_EQ(tok->vocab_size(), 1000u);
  EXPECT_EQ(tok->eos_id(), 999u);
  EXPECT_EQ(tok->encode("<|endoftext|>", true), Ids{999});
  const std::string training_text = read_bytes(files[0]);
  const Ids ids = tok->encode(training_text);
  EXPECT_GT(double(training_text.size()) / double(ids.size()), 2.5);  // bytes alone would be 1.0
  EXPECT_EQ(tok->decode(ids), training_text);
  const std::string unseen = read_bytes(kCorpus + "/validation/moby_dick.txt");
  EXPECT_EQ(tok->decode(tok->encode(unseen)), unseen);
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const std::string text = random_multilingual_text(seed, 200);
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  }
  // Decoding an id past the vocab is an error naming it.
  const std::string message = error_of([&] { tok->decode(Ids{5, 1000}); });
  EXPECT_TRUE(contains(message, "1000") && contains(message, "position 1")) << message;
}

TEST(BpeTraining, StopsWhenThePairsRunOut) {
  ScratchFolder dir;
  write_bytes(dir.file("tiny.txt"), "ab ab ab abc");
  const BpeTrainingReport report = train_bpe_tokenizer({dir.file("tiny.txt")}, 5000, dir.file("t.json"));
  EXPECT_LT(report.vocab_size, 270u);
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(dir.file("t.json"));
  EXPECT_EQ(tok->vocab_size(), report.vocab_size);
  EXPECT_EQ(tok->encode(" abc"), Ids{tok->eos_id() - 1});  // the last merge made " abc"
}

TEST(BpeTraining, BadInputIsAnErrorAndWritesNothing) {
  ScratchFolder dir;
  write_bytes(dir.file("text.txt"), "some text to learn from");
  write_bytes(dir.file("blank.txt"), " \n\t\n");
  std::string message = error_of([&] { train_bpe_tokenizer({dir.file("text.txt")}, 256, dir.file("out.json")); });
  EXPECT_TRUE(contains(message, "256") && contains(message, "at least 257")) << message;
  message = error_of([&] {
    train_bpe_tokenizer({dir.file("text.txt"), dir.file("absent.txt")}, 300, dir.file("out.json"));
  });
  EXPECT_TRUE(contains(message, dir.file("absent.txt"))) << message;
  message = error_of([&] { train_bpe_tokenizer({dir.file("blank.txt")}, 300, dir.file("out.json")); });
  EXPECT_TRUE(contains(message, "blank") && contains(message, dir.file("blank.txt"))) << message;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.json")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2);  // no temporary left behind
}

TEST(BpeTraining, CommittedQuickstartTokenizerIsReproducible) {
  const std::string committed = kTokenizerFiles + "/quickstart-4k.json";
  ScratchFolder dir;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus + "/train"))
    files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  train_bpe_tokenizer(files, 4096, dir.file("retrained.json"));
  EXPECT_EQ(read_bytes(dir.file("retrained.json")), read_bytes(committed))
      << "data/tokenizers/quickstart-4k.json no longer matches training on data/corpus/quickstart/train";
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(committed);
  EXPECT_EQ(tok->vocab_size(), 4096u);
  EXPECT_EQ(tok->eos_id(), 4095u);
}

TEST(TokenizerCli, TrainEncodeDecode) {
  ScratchFolder dir;
  const std::string fathom = FATHOM_BINARY;
  const std::string out = dir.file("tok.json");
  auto [status, text] =
      run(fathom + " tokenizer train --vocab 600 --out " + out + " " + kCorpus + "/train/sotu_2009-2019.txt", dir);
  ASSERT_EQ(status, 0) << text;
  EXPECT_TRUE(contains(text, "vocab 600")) << text;
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(out);

  const std::string sample = "We the People <|endoftext|> of the United States";
  std::tie(status, text) =
      run(fathom + " tokenizer encode --tokenizer " + out + " --allow-special '" + sample + "'", dir);
  ASSERT_EQ(status, 0) << text;
  std::string expected;
  for (uint32_t id : tok->encode(sample, true)) {
    if (!expected.empty()) expected += ' ';
    expected += std::to_string(id);
  }
  EXPECT_EQ(text, expected + "\n");
  EXPECT_TRUE(contains(text, " 599 ")) << text;

  std::tie(status, text) = run(fathom + " tokenizer decode --tokenizer " + out + " " + expected, dir);
  ASSERT_EQ(status, 0) << text;
  EXPECT_EQ(text, sample + "\n");

  std::tie(status, text) = run(fathom + " tokenizer encode --tokenizer gpt2 'Hello world'", dir);
  EXPECT_EQ(text, "15496 995\n");
  std::tie(status, text) = run(fathom + " tokenizer decode --tokenizer gpt2 15496 50257", dir);
  EXPECT_NE(status, 0);
  EXPECT_TRUE(contains(text, "50257") && contains(text, "position 1")) << text;
  std::tie(status, text) = run(fathom + " tokenizer decode --tokenizer gpt2 15496 x7", dir);
  EXPECT_NE(status, 0);
  EXPECT_TRUE(contains(text, "'x7' is not a token id")) << text;
  std::tie(status, text) = run(fathom + " tokenizer train --vocab 100 --out " + dir.file("small.json") + " " + kCorpus +
                                   "/train/sotu_2009-2019.txt",
                               dir);
  EXPECT_NE(status, 0);
  EXPECT_TRUE(contains(text, "at least 257")) << text;
  EXPECT_FALSE(std::filesystem::exists(dir.file("small.json")));
}
