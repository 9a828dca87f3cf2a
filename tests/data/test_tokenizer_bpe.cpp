// Byte-level BPE tokenizers on the shipped files: golden ids, special tokens, the HF tokenizer.json
// form agreeing with the tiktoken form, round trips on real and random multilingual text, both
// merge strategies agreeing, and make_tokenizer's names and paths.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include "data/bpe_files.h"
#include "data/byte_tokenizer.h"
#include "data/pretokenizer.h"
#include "tests/support/data_test_helpers.h"
#include "tests/support/tokenizer_test_helpers.h"

using namespace fathom;
using namespace fathom::testing;
using Ids = std::vector<uint32_t>;

namespace {

const BpeTokenizer& bpe(const std::string& name) {
  const auto* tok = dynamic_cast<const BpeTokenizer*>(&shared_tokenizer(name));
  if (tok == nullptr) throw std::runtime_error(name + " is not a BPE tokenizer");
  return *tok;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST(BpeTokenizer, Cl100kGoldenIds) {
  const Tokenizer& tok = shared_tokenizer("cl100k");
  EXPECT_EQ(tok.encode("Hello world"), (Ids{9906, 1917}));
  EXPECT_EQ(tok.encode("I'm 12345 tokens\nnew line"), (Ids{40, 2846, 220, 4513, 1774, 11460, 198, 943, 1584}));
  EXPECT_EQ(tok.vocab_size(), 100277u);
  EXPECT_EQ(tok.eos_id(), 100257u);
  EXPECT_FALSE(tok.pad_id().has_value());
  EXPECT_EQ(tok.name(), "cl100k");
}

TEST(BpeTokenizer, Gpt2GoldenIds) {
  const Tokenizer& tok = shared_tokenizer("gpt2");
  EXPECT_EQ(tok.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok.encode("Call me Ishmael."), (Ids{14134, 502, 1148, 21720, 417, 13}));
  EXPECT_EQ(tok.vocab_size(), 50257u);
  EXPECT_EQ(tok.eos_id(), 50256u);
}

TEST(BpeTokenizer, Dolma2IsCl100kWithEosAndPad) {
  const Tokenizer& dolma2 = shared_tokenizer("dolma2");
  EXPECT_EQ(dolma2.vocab_size(), 100278u);
  EXPECT_EQ(dolma2.eos_id(), 100257u);
  ASSERT_TRUE(dolma2.pad_id().has_value());
  EXPECT_EQ(*dolma2.pad_id(), 100277u);
  EXPECT_EQ(dolma2.token_to_id("<|pad|>"), std::optional<uint32_t>(100277));
  EXPECT_EQ(dolma2.decode(Ids{9906, 100277, 100257}), "Hello<|pad|><|endoftext|>");
  const Tokenizer& cl100k = shared_tokenizer("cl100k");
  for (size_t i = 0; i < quickstart_documents().size(); i += 5)
    EXPECT_EQ(dolma2.encode(quickstart_documents()[i]), cl100k.encode(quickstart_documents()[i])) << "document " << i;
  // 100256 lies below the vocab size but names no token in cl100k_base.
  const std::string message = error_of([&] { dolma2.decode(Ids{9906, 100256}); });
  EXPECT_TRUE(contains(message, "100256") && contains(message, "position 1") && contains(message, "no token"))
      << message;
}

TEST(BpeTokenizer, SpecialTokensOnlyWhenAllowed) {
  for (const auto& [name, eos] : std::vector<std::pair<std::string, uint32_t>>{
           {"cl100k", 100257}, {"dolma2", 100257}, {"gpt2", 50256}, {kCl100kHfJson, 100257}}) {
    SCOPED_TRACE(name);
    const Tokenizer& tok = shared_tokenizer(name);
    EXPECT_EQ(tok.encode("<|endoftext|>", true), Ids{eos});
    EXPECT_EQ(tok.token_to_id("<|endoftext|>"), std::optional<uint32_t>(eos));
    // By default the text is plain text: several ordinary tokens, none of them EOS.
    const Ids plain = tok.encode("<|endoftext|>");
    EXPECT_GT(plain.size(), 1u);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), eos), 0);
    EXPECT_EQ(tok.decode(plain), "<|endoftext|>");
    // Between ordinary text, the special token splits it: each side encodes on its own.
    const std::string left = "The end.", right = " A new document begins";
    Ids expected = tok.encode(left);
    expected.push_back(eos);
    const Ids right_ids = tok.encode(right);
    expected.insert(expected.end(), right_ids.begin(), right_ids.end());
    EXPECT_EQ(tok.encode(left + "<|endoftext|>" + right, true), expected);
    EXPECT_EQ(tok.decode(expected), left + "<|endoftext|>" + right);
  }
  // cl100k's other specials, each recognised with allow_special.
  const Tokenizer& cl100k = shared_tokenizer("cl100k");
  EXPECT_EQ(cl100k.encode("<|fim_prefix|>x<|fim_middle|><|fim_suffix|><|endofprompt|>", true),
            (Ids{100258, 87, 100259, 100260, 100276}));
  // The byte tokenizer follows the same rule.
  const ByteTokenizer bytes;
  EXPECT_EQ(bytes.encode("a<|endoftext|>", true), (Ids{'a', 256}));
  EXPECT_EQ(bytes.encode("a<|endoftext|>").size(), 14u);
}

TEST(BpeTokenizer, HfTokenizerJsonMatchesTiktokenOnTheCorpus) {
  const Tokenizer& tiktoken = shared_tokenizer("cl100k");
  const Tokenizer& hf = shared_tokenizer(kCl100kHfJson);
  EXPECT_EQ(hf.vocab_size(), tiktoken.vocab_size());
  EXPECT_EQ(hf.eos_id(), tiktoken.eos_id());
  size_t tokens = 0;
  for (const std::string& doc : quickstart_documents()) {
    const Ids ids = tiktoken.encode(doc);
    ASSERT_EQ(hf.encode(doc), ids) << doc.substr(0, 80);
    tokens += ids.size();
  }
  EXPECT_GT(tokens, 200000u);  // the whole corpus, not a sample
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const std::string text = random_multilingual_text(seed, 300);
    EXPECT_EQ(hf.encode(text), tiktoken.encode(text)) << "seed " << seed;
  }
}

TEST(BpeTokenizer, RoundTripsRealText) {
  for (const std::string name : {"cl100k", "gpt2"}) {
    const Tokenizer& tok = shared_tokenizer(name);
    for (const std::string& doc : quickstart_documents()) {
      const Ids ids = tok.encode(doc);
      ASSERT_LT(ids.size(), doc.size() / 3) << name << ": real English should take well under a token per 3 bytes";
      ASSERT_EQ(tok.decode(ids), doc) << name;
    }
  }
}

TEST(BpeTokenizer, RoundTripsMultilingualTextEmojiAndWhitespace) {
  const std::vector<std::string> fixed = {"Größe straße Ærø naïve café",
                                          "日本語のテキスト",
                                          "Привет, мир!",
                                          "العربية עברית हिन्दी",
                                          "١٢٣ १२३ ½ Ⅻ 3.14159",
                                          "🐋 👩‍👩‍👧 👍🏽 🇩🇪",
                                          "a   b\t\t\tc\n\n\n  d \r\n e\u00a0f\u3000g",
                                          "   ",
                                          "\n",
                                          "x",
                                          " leading and trailing spaces  "};
  for (const std::string name : {"cl100k", "gpt2", "dolma2"}) {
    const Tokenizer& tok = shared_tokenizer(name);
    for (const std::string& text : fixed) EXPECT_EQ(tok.decode(tok.encode(text)), text) << name;
    for (uint32_t seed = 100; seed < 140; ++seed) {
      const std::string text = random_multilingual_text(seed, 200);
      ASSERT_EQ(tok.decode(tok.encode(text)), text) << name << " seed " << seed;
      ASSERT_EQ(tok.decode(tok.encode(text, true)), text) << name << " seed " << seed;
    }
  }
  EXPECT_TRUE(shared_tokenizer("cl100k").encode("").empty());
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  // Random bytes are mostly invalid UTF-8: the regex matches none of those bytes, and they must
  // still come back exactly.
  std::mt19937 rng(77);
  for (const std::string name : {"cl100k", "gpt2"}) {
    const Tokenizer& tok = shared_tokenizer(name);
    for (int trial = 0; trial < 20; ++trial) {
      std::string bytes(1 + rng() % 3000, '\0');
      for (char& c : bytes) c = char(rng() & 0xFF);
      ASSERT_EQ(tok.decode(tok.encode(bytes)), bytes) << name << " trial " << trial;
    }
  }
}

TEST(BpeTokenizer, VeryLongPiecesRoundTripQuickly) {
  const Tokenizer& tok = shared_tokenizer("cl100k");
  std::mt19937 rng(5);
  std::string letters(200000, 'a');
  for (char& c : letters) c = char('a' + rng() % 26);  // one 200 KB piece (\p{L}+)
  const std::string spaces = std::string(300000, ' ') + "x" + std::string(1000, '\n');
  for (const std::string& text : {letters, spaces}) {
    const Ids ids = tok.encode(text);
    EXPECT_LT(ids.size(), text.size());
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(BpeTokenizer, MergeStrategiesGiveTheSameIds) {
  std::mt19937 rng(11);
  for (const std::string name : {"cl100k", "gpt2"}) {
    const BpeModel& model = bpe(name).model();
    for (int trial = 0; trial < 400; ++trial) {
      // Substrings of real text (many merges apply) and random bytes (few do), up to 300 bytes.
      std::string piece;
      const size_t length = 1 + rng() % 300;
      if (trial % 2 == 0) {
        const std::string& doc = quickstart_documents()[rng() % quickstart_documents().size()];
        piece = doc.substr(rng() % (doc.size() - length), length);
      } else {
        piece.resize(length);
        for (char& c : piece) c = char(rng() % 8 == 0 ? rng() & 0xFF : 'a' + rng() % 4);
      }
      Ids scan, heap;
      model.merge(piece, BpeModel::MergeStrategy::scan, scan);
      model.merge(piece, BpeModel::MergeStrategy::heap, heap);
      ASSERT_EQ(scan, heap) << name << " trial " << trial;
      // The cached path agrees too (the first call fills the cache, the second reads it).
      for (int pass = 0; pass < 2; ++pass) {
        Ids cached;
        model.encode_piece(piece, cached);
        if (bpe(name).model().find(piece)) continue;  // tiktoken's whole-piece shortcut
        ASSERT_EQ(cached, scan) << name << " trial " << trial;
      }
    }
  }
}

TEST(BpeTokenizer, ThreadsEncodeTheSameAsOneThread) {
  const Tokenizer& tok = shared_tokenizer("gpt2");
  const std::vector<std::string>& docs = quickstart_documents();
  std::vector<Ids> expected;
  for (const std::string& d : docs) expected.push_back(tok.encode(d));
  std::vector<std::vector<Ids>> results(2);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < docs.size(); ++i) results[t].push_back(tok.encode(docs[(i + t * 7) % docs.size()]));
    });
  }
  for (std::thread& th : threads) th.join();
  for (size_t t = 0; t < results.size(); ++t)
    for (size_t i = 0; i < docs.size(); ++i) ASSERT_EQ(results[t][i], expected[(i + t * 7) % docs.size()]);
}

TEST(BpeTokenizer, PretokenizerPiecesCoverTheText) {
  const Pretokenizer cl100k(std::string(kCl100kPattern), "test");
  std::vector<std::string_view> pieces;
  cl100k.split("I'm 12345 tokens\nnew  line", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"I", "'m", " ", "123", "45", " tokens", "\n", "new", " ", " line"}));
  const Pretokenizer gpt2(std::string(kGpt2Pattern), "test");
  pieces.clear();
  gpt2.split("Hello  world's 12345!!", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"Hello", " ", " world", "'s", " 12345", "!!"}));
  // Invalid UTF-8 between matches becomes pieces of its own.
  pieces.clear();
  gpt2.split("ab\xFF\xFE cd", pieces);
  std::string joined;
  for (std::string_view p : pieces) joined += p;
  EXPECT_EQ(joined, "ab\xFF\xFE cd");
  const std::string message = error_of([] { Pretokenizer("(unclosed", "my tokenizer.json"); });
  EXPECT_TRUE(contains(message, "my tokenizer.json") && contains(message, "does not compile")) << message;
}

TEST(BpeTokenizer, DecodingAnOutOfVocabIdIsAnError) {
  for (const std::string name : {"cl100k", "dolma2", "gpt2"}) {
    const Tokenizer& tok = shared_tokenizer(name);
    const Ids ids = {15, tok.vocab_size()};
    const std::string message = error_of([&] { tok.decode(ids); });
    EXPECT_TRUE(contains(message, std::to_string(tok.vocab_size())) && contains(message, "position 1") &&
                contains(message, name))
        << message;
  }
}

TEST(MakeTokenizer, NamesAndPaths) {
  const std::vector<std::string> names = known_tokenizers();
  EXPECT_EQ(names, (std::vector<std::string>{"bytes", "cl100k", "dolma2", "gpt2"}));
  const std::string text = random_multilingual_text(9, 100);
  const Ids cl100k = shared_tokenizer("cl100k").encode(text);
  const Ids gpt2 = shared_tokenizer("gpt2").encode(text);
  // A rank file, a GPT-2 folder, a tokenizer.json and a folder holding one, each by path.
  const std::unique_ptr<Tokenizer> rank_file = make_tokenizer(kTokenizerFiles + "/cl100k_base.tiktoken");
  EXPECT_EQ(rank_file->encode(text), cl100k);
  EXPECT_EQ(rank_file->eos_id(), 100257u);
  EXPECT_EQ(rank_file->name(), kTokenizerFiles + "/cl100k_base.tiktoken");
  const std::unique_ptr<Tokenizer> folder = make_tokenizer(kTokenizerFiles + "/gpt2");
  EXPECT_EQ(folder->encode(text), gpt2);
  const std::unique_ptr<Tokenizer> hf_folder = make_tokenizer(kTokenizerFiles + "/cl100k_hf");
  EXPECT_EQ(hf_folder->encode(text), cl100k);
  // Unknown names list the known ones.
  const std::string message = error_of([] { make_tokenizer("gpt3"); });
  EXPECT_TRUE(contains(message, "gpt3") && contains(message, "cl100k, dolma2, gpt2")) << message;
}

TEST(MakeTokenizer, FathomTokenizersOverridesTheFolder) {
  ScratchFolder dir;
  std::filesystem::create_directories(dir.path() / "gpt2");
  std::filesystem::copy_file(kTokenizerFiles + "/gpt2/encoder.json", dir.path() / "gpt2/encoder.json");
  std::filesystem::copy_file(kTokenizerFiles + "/gpt2/vocab.bpe", dir.path() / "gpt2/vocab.bpe");
  {
    ScopedEnv env("FATHOM_TOKENIZERS", dir.path().string());
    EXPECT_EQ(make_tokenizer("gpt2")->encode("Hello world"), (Ids{15496, 995}));
    // cl100k_base.tiktoken is not in the override folder: the error names where it looked.
    const std::string message = error_of([] { make_tokenizer("cl100k"); });
    EXPECT_TRUE(contains(message, dir.path().string() + "/cl100k_base.tiktoken")) << message;
  }
}

TEST(MakeTokenizer, OtherRankFilesPutEosAfterTheLastRank) {
  // A small rank file of the 256 bytes plus "ab", "abc", " a": EOS becomes id 259.
  ScratchFolder dir;
  std::string lines;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  for (const char* t : {"ab", "abc", " a"}) tokens.emplace_back(t);
  for (size_t rank = 0; rank < tokens.size(); ++rank) lines += base64(tokens[rank]) + " " + std::to_string(rank) + "\n";
  write_bytes(dir.file("tiny.tiktoken"), lines);
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(dir.file("tiny.tiktoken"));
  EXPECT_EQ(tok->vocab_size(), 260u);
  EXPECT_EQ(tok->eos_id(), 259u);
  // " abd": "ab" (rank 256) merges before " a" (rank 258), leaving ' ' + "ab" + 'd'.
  EXPECT_EQ(tok->encode("abc abd", true), (Ids{257, ' ', 256, 'd'}));
  EXPECT_EQ(tok->encode("abc<|endoftext|>", true), (Ids{257, 259}));
  EXPECT_EQ(tok->decode(Ids{258, 259, 'z'}), " a<|endoftext|>z");
}
