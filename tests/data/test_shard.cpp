#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/crc32.h"
#include "data/shard.h"
#include "tests/support/data_test_helpers.h"

using namespace fathom;
using fathom::testing::error_of;
using fathom::testing::random_tokens;
using fathom::testing::read_bytes;
using fathom::testing::ScratchFolder;
using fathom::testing::write_bytes;

namespace {

void put_u32(std::string& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = char(v >> (8 * i));
}

// Recomputes the header CRC after a deliberate edit, so a test reaches the check it targets.
void fix_crc(std::string& bytes) {
  std::string header = bytes.substr(0, kShardHeaderBytes);
  put_u32(header, 28, 0);
  put_u32(bytes, 28, crc32(header.data(), header.size()));
}

std::vector<uint32_t> read_all(const TokenShard& shard) {
  std::vector<uint32_t> out(shard.size());
  shard.read(0, out);
  return out;
}

}  // namespace

TEST(Crc32, KnownAnswer) {
  // The standard CRC-32 check value.
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
}

TEST(TokenShard, RoundTripUint16) {
  ScratchFolder dir;
  const std::string path = dir.file("small.bin");
  const std::vector<uint32_t> tokens = random_tokens(5001, 50257, 11);
  write_shard(path, tokens, 50257);
  EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + 2 * tokens.size());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const TokenShard shard = open_shard(path);
  EXPECT_EQ(shard.token_width(), 2u);
  EXPECT_EQ(shard.vocab_size(), 50257u);
  ASSERT_EQ(shard.size(), tokens.size());
  EXPECT_EQ(read_all(shard), tokens);
  for (size_t i = 0; i < tokens.size(); i += 97) EXPECT_EQ(shard[i], tokens[i]);
  EXPECT_EQ(shard.at(tokens.size() - 1), tokens.back());
  EXPECT_THROW(shard.at(tokens.size()), Error);
}

TEST(TokenShard, RoundTripUint32) {
  ScratchFolder dir;
  const std::string path = dir.file("large.bin");
  std::vector<uint32_t> tokens = random_tokens(3000, 100352, 12);
  tokens[17] = 100351;  // the largest valid id, well past uint16
  write_shard(path, tokens, 100352);
  EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + 4 * tokens.size());
  const TokenShard shard = open_shard(path);
  EXPECT_EQ(shard.token_width(), 4u);
  EXPECT_EQ(read_all(shard), tokens);
  std::vector<uint32_t> middle(100);
  shard.read(1000, middle);
  EXPECT_EQ(middle, std::vector<uint32_t>(tokens.begin() + 1000, tokens.begin() + 1100));
  EXPECT_THROW(shard.read(2950, middle), Error);
}

TEST(TokenShard, WidthBoundaryAt65536) {
  EXPECT_EQ(shard_token_width(257), 2u);
  EXPECT_EQ(shard_token_width(65536), 2u);
  EXPECT_EQ(shard_token_width(65537), 4u);
  ScratchFolder dir;
  std::vector<uint32_t> tokens = random_tokens(100, 65536, 13);
  tokens[3] = 65535;
  write_shard(dir.file("edge.bin"), tokens, 65536);
  const TokenShard shard = open_shard(dir.file("edge.bin"));
  EXPECT_EQ(shard.token_width(), 2u);
  EXPECT_EQ(read_all(shard), tokens);
}

TEST(TokenShard, EmptyShardAndOverwrite) {
  ScratchFolder dir;
  const std::string path = dir.file("s.bin");
  write_shard(path, std::vector<uint32_t>{}, 257);
  EXPECT_EQ(open_shard(path).size(), 0u);
  const std::vector<uint32_t> tokens = random_tokens(64, 257, 14);
  write_shard(path, tokens, 257);  // replaces the old file
  EXPECT_EQ(read_all(open_shard(path)), tokens);
}

TEST(TokenShard, MoveKeepsTheMapping) {
  ScratchFolder dir;
  const std::vector<uint32_t> tokens = random_tokens(300, 1000, 15);
  write_shard(dir.file("m.bin"), tokens, 1000);
  TokenShard a = open_shard(dir.file("m.bin"));
  TokenShard b = std::move(a);
  EXPECT_EQ(read_all(b), tokens);
  TokenShard c = open_shard(dir.file("m.bin"));
  c = std::move(b);
  EXPECT_EQ(read_all(c), tokens);
}

TEST(TokenShard, WritingAnOutOfVocabTokenLeavesNoFile) {
  ScratchFolder dir;
  const std::string path = dir.file("bad.bin");
  std::vector<uint32_t> tokens = random_tokens(50, 257, 16);
  tokens[42] = 257;
  const std::string message = error_of([&] { write_shard(path, tokens, 257); });
  EXPECT_NE(message.find("position 42"), std::string::npos) << message;
  EXPECT_NE(message.find("257"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_THROW(write_shard(path, random_tokens(5, 10, 1), 0), Error);
}

TEST(TokenShard, WritingIntoAMissingFolderFails) {
  ScratchFolder dir;
  const std::string path = dir.file("no/such/folder/x.bin");
  const std::string message = error_of([&] { write_shard(path, random_tokens(5, 257, 17), 257); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

class CorruptShard : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("c.bin");
    tokens_ = random_tokens(1000, 5000, 18);
    write_shard(path_, tokens_, 5000);
    bytes_ = read_bytes(path_);
  }
  // Writes the edited bytes and returns the error open_shard gives for them.
  std::string open_error() {
    write_bytes(path_, bytes_);
    const std::string message = error_of([&] { open_shard(path_); });
    EXPECT_NE(message.find(path_), std::string::npos) << "error should name the file: " << message;
    return message;
  }

  ScratchFolder dir_;
  std::string path_;
  std::vector<uint32_t> tokens_;
  std::string bytes_;
};

TEST_F(CorruptShard, WrongMagic) {
  bytes_[0] = 'X';
  EXPECT_NE(open_error().find("magic"), std::string::npos);
}

TEST_F(CorruptShard, Truncated) {
  bytes_.resize(bytes_.size() - 3);
  const std::string message = open_error();
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("should be 2064 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("is 2061 bytes"), std::string::npos) << message;
}

TEST_F(CorruptShard, ShorterThanTheHeader) {
  bytes_.resize(40);
  const std::string message = open_error();
  EXPECT_NE(message.find("40 bytes"), std::string::npos) << message;
}

TEST_F(CorruptShard, TrailingBytes) {
  bytes_ += "junk";
  const std::string message = open_error();
  EXPECT_NE(message.find("trailing"), std::string::npos) << message;
  EXPECT_NE(message.find("should be 2064 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("is 2068 bytes"), std::string::npos) << message;
}

TEST_F(CorruptShard, WrongVersion) {
  put_u32(bytes_, 8, 2);
  fix_crc(bytes_);
  EXPECT_NE(open_error().find("version 2"), std::string::npos);
}

TEST_F(CorruptShard, WrongWidth) {
  put_u32(bytes_, 12, 3);
  fix_crc(bytes_);
  EXPECT_NE(open_error().find("width 3"), std::string::npos);
}

TEST_F(CorruptShard, HeaderCrcMismatch) {
  put_u32(bytes_, 24, 4000);  // a smaller vocab without updating the CRC
  EXPECT_NE(open_error().find("CRC"), std::string::npos);
}

TEST_F(CorruptShard, NonZeroReservedBytes) {
  bytes_[50] = 1;
  fix_crc(bytes_);
  EXPECT_NE(open_error().find("reserved"), std::string::npos);
}

TEST_F(CorruptShard, TokenNotBelowVocab) {
  const size_t position = 733;
  const uint16_t bad = 5000;
  std::memcpy(&bytes_[kShardHeaderBytes + 2 * position], &bad, 2);
  const std::string message = open_error();
  EXPECT_NE(message.find("token 5000 at position 733"), std::string::npos) << message;
}

TEST_F(CorruptShard, VocabShrunkBelowAStoredToken) {
  // A consistent header whose vocab no longer covers the largest stored token.
  const uint32_t largest = *std::max_element(tokens_.begin(), tokens_.end());
  const size_t first = size_t(std::find(tokens_.begin(), tokens_.end(), largest) - tokens_.begin());
  put_u32(bytes_, 24, largest);
  fix_crc(bytes_);
  const std::string message = open_error();
  EXPECT_NE(message.find("position " + std::to_string(first)), std::string::npos) << message;
}

TEST(TokenShard, MissingFileAndFolder) {
  ScratchFolder dir;
  const std::string missing = dir.file("absent.bin");
  const std::string message = error_of([&] { open_shard(missing); });
  EXPECT_NE(message.find(missing), std::string::npos) << message;
  EXPECT_NE(message.find("No such file"), std::string::npos) << message;
  EXPECT_THROW(open_shard(dir.path().string()), Error);
}
