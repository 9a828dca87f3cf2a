#include <gtest/gtest.h>

#include "data/byte_tokenizer.h"
#include "data/tokenizer.h"
#include "tests/support/data_test_helpers.h"

using namespace fathom;
using fathom::testing::error_of;

TEST(ByteTokenizer, RoundTripsMultibyteUtf8) {
  ByteTokenizer tok;
  // 2-, 3- and 4-byte UTF-8 sequences: é, —, 日本語, 🐋.
  const std::string text =
      "Call me Ishmael. Caf\xC3\xA9 \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x90\x8B!";
  const std::vector<uint32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());  // one id per byte, not per character
  EXPECT_EQ(ids[0], uint32_t('C'));
  const size_t e_acute = text.find("\xC3\xA9");
  EXPECT_EQ(ids[e_acute], 0xC3u);
  EXPECT_EQ(ids[e_acute + 1], 0xA9u);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(ByteTokenizer, RoundTripsArbitraryBytes) {
  ByteTokenizer tok;
  // Random bytes, which include invalid UTF-8 and NULs: bytes are bytes.
  std::mt19937 rng(21);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = char(rng() & 0xFF);
  const std::vector<uint32_t> ids = tok.encode(bytes);
  for (uint32_t id : ids) ASSERT_LT(id, 256u);
  EXPECT_EQ(tok.decode(ids), bytes);
}

TEST(ByteTokenizer, EndOfTextIsItsOwnId) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 257u);
  EXPECT_EQ(tok.eos_id(), 256u);
  EXPECT_EQ(tok.name(), "bytes");
  const std::vector<uint32_t> ids = {'h', 'i', 256, 0xE2, 0x80, 0x94};
  EXPECT_EQ(tok.decode(ids), "hi<|endoftext|>\xE2\x80\x94");
  // The special token's text is plain text to encode(); documents get EOS appended explicitly.
  EXPECT_EQ(tok.encode("<|endoftext|>").size(), 13u);
}

TEST(ByteTokenizer, DecodingAnOutOfVocabIdIsAnError) {
  ByteTokenizer tok;
  const std::vector<uint32_t> ids = {'a', 'b', 257};
  const std::string message = error_of([&] { tok.decode(ids); });
  EXPECT_NE(message.find("257"), std::string::npos) << message;
  EXPECT_NE(message.find("position 2"), std::string::npos) << message;
}

TEST(Tokenizer, MakeByName) {
  const std::unique_ptr<Tokenizer> tok = make_tokenizer("bytes");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->vocab_size(), 257u);
  EXPECT_EQ(tok->decode(tok->encode("fathom \xF0\x9F\x90\x8B")), "fathom \xF0\x9F\x90\x8B");
  const std::string message = error_of([] { make_tokenizer("gpt3"); });
  EXPECT_NE(message.find("gpt3"), std::string::npos) << message;
  EXPECT_NE(message.find("bytes"), std::string::npos) << message;
}
