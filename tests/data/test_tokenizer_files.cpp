// Bad tokenizer files: each problem is an error naming the file and what is wrong. Every test
// starts from a small valid file (checked to load) and damages one thing.
#include <gtest/gtest.h>

#include "core/json.h"
#include "data/bpe_files.h"
#include "data/bpe_trainer.h"
#include "data/byte_level.h"
#include "tests/support/data_test_helpers.h"
#include "tests/support/tokenizer_test_helpers.h"

using namespace fathom;
using namespace fathom::testing;

namespace {

// --- tiktoken rank files -------------------------------------------------------------------------

// "<base64> <rank>" lines: the 256 bytes, then "ab" and "abc".
std::vector<std::string> rank_lines() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  tokens.emplace_back("ab");
  tokens.emplace_back("abc");
  std::vector<std::string> lines;
  for (size_t rank = 0; rank < tokens.size(); ++rank)
    lines.push_back(base64(tokens[rank]) + " " + std::to_string(rank));
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

TiktokenSpec small_spec() {
  return {
      .name = "small", .pattern = std::string(kGpt2Pattern), .added = {}, .eos_text = "<|endoftext|>", .pad_text = {}};
}

// The error of loading a rank file with these lines.
std::string rank_file_error(const ScratchFolder& dir, const std::vector<std::string>& lines) {
  write_bytes(dir.file("bad.tiktoken"), join_lines(lines));
  return error_of([&] { load_tiktoken(dir.file("bad.tiktoken"), small_spec()); });
}

}  // namespace

TEST(TokenizerFiles, ValidSmallRankFileLoads) {
  ScratchFolder dir;
  write_bytes(dir.file("ok.tiktoken"), join_lines(rank_lines()));
  const auto tok = load_tiktoken(dir.file("ok.tiktoken"), small_spec());
  EXPECT_EQ(tok->vocab_size(), 259u);
  EXPECT_EQ(tok->encode("abc"), (std::vector<uint32_t>{257}));
}

TEST(TokenizerFiles, RankFileWithBadBase64) {
  ScratchFolder dir;
  std::vector<std::string> lines = rank_lines();
  lines[10] = "I*Q= 10";
  const std::string message = rank_file_error(dir, lines);
  EXPECT_TRUE(contains(message, dir.file("bad.tiktoken")) && contains(message, "line 11") &&
              contains(message, "invalid base64"))
      << message;
  lines[10] = "IQ 10";  // not a multiple of four characters
  EXPECT_TRUE(contains(rank_file_error(dir, lines), "invalid base64"));
}

TEST(TokenizerFiles, RankFileWithNonConsecutiveOrRepeatedRanks) {
  ScratchFolder dir;
  std::vector<std::string> lines = rank_lines();
  lines[257] = base64("abc") + " 258";  // skips 257
  std::string message = rank_file_error(dir, lines);
  EXPECT_TRUE(contains(message, "line 258") && contains(message, "skips rank 257")) << message;
  lines = rank_lines();
  lines[257] = base64("abc") + " 256";  // 256 again
  message = rank_file_error(dir, lines);
  EXPECT_TRUE(contains(message, "line 258") && contains(message, "rank 256 repeats")) << message;
}

TEST(TokenizerFiles, RankFileWithRepeatedTokenBytes) {
  ScratchFolder dir;
  std::vector<std::string> lines = rank_lines();
  lines[257] = base64("ab") + " 257";
  const std::string message = rank_file_error(dir, lines);
  EXPECT_TRUE(contains(message, dir.file("bad.tiktoken")) && contains(message, "rank 257") &&
              contains(message, "repeats the bytes \"ab\""))
      << message;
}

TEST(TokenizerFiles, RankFileWithMalformedLines) {
  ScratchFolder dir;
  for (const std::string bad : {"IQ==", "IQ== 33 extra", "IQ==  33", "IQ== x", "IQ== -1"}) {
    std::vector<std::string> lines = rank_lines();
    lines.push_back(bad);
    const std::string message = rank_file_error(dir, lines);
    EXPECT_TRUE(contains(message, dir.file("bad.tiktoken")) && contains(message, "line 259")) << bad << ": " << message;
  }
}

TEST(TokenizerFiles, RankFileMissingASingleByte) {
  ScratchFolder dir;
  std::vector<std::string> lines;
  uint32_t rank = 0;
  for (int b = 0; b < 256; ++b)
    if (b != 'q') lines.push_back(base64(std::string(1, char(b))) + " " + std::to_string(rank++));
  const std::string message = rank_file_error(dir, lines);
  EXPECT_TRUE(contains(message, "no token for the single byte 0x71")) << message;
}

TEST(TokenizerFiles, RankFileEmptyOrMissing) {
  ScratchFolder dir;
  EXPECT_TRUE(contains(rank_file_error(dir, {}), "holds no tokens"));
  const std::string message = error_of([&] { load_tiktoken(dir.file("absent.tiktoken"), small_spec()); });
  EXPECT_TRUE(contains(message, dir.file("absent.tiktoken"))) << message;
  EXPECT_TRUE(contains(error_of([&] { make_tokenizer(dir.file("absent.tiktoken")); }), "no file or folder"));
}

// --- GPT-2 encoder.json + vocab.bpe ----------------------------------------------------------------

namespace {

// The 256 byte-level characters, "ab" and "<|endoftext|>"; one merge "a b".
std::string encoder_json(const std::string& extra = "") {
  std::string json = "{";
  const auto& order = bytes_in_byte_level_order();
  for (uint32_t id = 0; id < 256; ++id)
    json += json_quote(bytes_to_byte_level(std::string(1, char(order[id])))) + ": " + std::to_string(id) + ", ";
  return json + "\"ab\": 256, " + extra + "\"<|endoftext|>\": 257}";
}

void write_gpt2_folder(const ScratchFolder& dir, const std::string& encoder, const std::string& merges) {
  write_bytes(dir.file("encoder.json"), encoder);
  write_bytes(dir.file("vocab.bpe"), merges);
}

std::string gpt2_error(const ScratchFolder& dir, const std::string& encoder, const std::string& merges) {
  write_gpt2_folder(dir, encoder, merges);
  return error_of([&] { load_gpt2_folder(dir.path(), "small"); });
}

const std::string kMerges = "#version: 0.2\na b\n";

}  // namespace

TEST(TokenizerFiles, ValidSmallGpt2FolderLoads) {
  ScratchFolder dir;
  write_gpt2_folder(dir, encoder_json(), kMerges);
  const auto tok = load_gpt2_folder(dir.path(), "small");
  EXPECT_EQ(tok->vocab_size(), 258u);
  EXPECT_EQ(tok->eos_id(), 257u);
  EXPECT_EQ(tok->encode("abab<|endoftext|>", true), (std::vector<uint32_t>{256, 256, 257}));
}

TEST(TokenizerFiles, MalformedEncoderJson) {
  ScratchFolder dir;
  const std::string path = dir.file("encoder.json");
  std::string message = gpt2_error(dir, encoder_json().substr(0, 500), kMerges);
  EXPECT_TRUE(contains(message, path) && contains(message, "invalid JSON at line 1")) << message;
  message = gpt2_error(dir, "[1, 2]", kMerges);
  EXPECT_TRUE(contains(message, path) && contains(message, "expected an object")) << message;
  for (const std::string bad_id : {"\"300\"", "-3", "1.5", "4000000000"}) {
    message = gpt2_error(dir, encoder_json("\"xy\": " + bad_id + ", "), kMerges);
    EXPECT_TRUE(contains(message, "\"xy\"") && contains(message, "must be an integer from 0 to 16777215")) << message;
  }
  message = gpt2_error(dir, encoder_json("\"日本\": 300, "), kMerges);
  EXPECT_TRUE(contains(message, "日本") && contains(message, "byte-level alphabet")) << message;
  message = gpt2_error(dir, encoder_json("\"xy\": 5, "), kMerges);
  EXPECT_TRUE(contains(message, path) && contains(message, "id 5 is given to two tokens")) << message;
  message = gpt2_error(dir, encoder_json("\"ab\": 7, "), kMerges);
  EXPECT_TRUE(contains(message, path) && contains(message, "duplicate object key \"ab\"")) << message;
  std::string no_eos = encoder_json();
  no_eos.replace(no_eos.find("<|endoftext|>"), 13, "<|end|>");
  message = gpt2_error(dir, no_eos, kMerges);
  EXPECT_TRUE(contains(message, path) && contains(message, "end-of-text token")) << message;
}

TEST(TokenizerFiles, MalformedVocabBpe) {
  ScratchFolder dir;
  const std::string path = dir.file("vocab.bpe");
  std::string message = gpt2_error(dir, encoder_json(), "#version: 0.2\na b c\n");
  EXPECT_TRUE(contains(message, path) && contains(message, "line 2") && contains(message, "<left> <right>")) << message;
  message = gpt2_error(dir, encoder_json(), "#version: 0.2\na b\nab\n");
  EXPECT_TRUE(contains(message, path) && contains(message, "line 3")) << message;
  message = gpt2_error(dir, encoder_json(), "#version: 0.2\na b\nb c\n");
  EXPECT_TRUE(contains(message, path) && contains(message, "line 3") && contains(message, "\"bc\" is not a token"))
      << message;
  message = gpt2_error(dir, encoder_json(), "a 日\n");
  EXPECT_TRUE(contains(message, "line 1") && contains(message, "\"日\" is not a token")) << message;
}

TEST(TokenizerFiles, Gpt2FolderWithAMissingFile) {
  ScratchFolder dir;
  write_bytes(dir.file("encoder.json"), encoder_json());
  std::string message = error_of([&] { load_gpt2_folder(dir.path(), "small"); });
  EXPECT_TRUE(contains(message, dir.file("vocab.bpe"))) << message;
  message = error_of([&] { make_tokenizer(dir.path().string()); });
  EXPECT_TRUE(contains(message, dir.file("vocab.bpe"))) << message;
}

// --- HF tokenizer.json -----------------------------------------------------------------------------

namespace {

// A small trained tokenizer.json (merges of "hello" and "world").
std::string small_tokenizer_json() {
  const std::unordered_map<std::string, uint64_t> counts = {{"hello", 5}, {" world", 3}, {" hello", 4}};
  return trained_bpe_json(train_bpe(counts, 262), kGpt2Pattern, "<|endoftext|>");
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("test setup: \"" + from + "\" not in the file");
  return text.replace(at, from.size(), to);
}

std::string hf_error(const ScratchFolder& dir, const std::string& json) {
  write_bytes(dir.file("tokenizer.json"), json);
  return error_of([&] { load_hf_tokenizer_json(dir.file("tokenizer.json"), "small"); });
}

}  // namespace

TEST(TokenizerFiles, ValidSmallTokenizerJsonLoads) {
  ScratchFolder dir;
  write_bytes(dir.file("tokenizer.json"), small_tokenizer_json());
  const auto tok = load_hf_tokenizer_json(dir.file("tokenizer.json"), "small");
  EXPECT_EQ(tok->vocab_size(), 263u);
  EXPECT_EQ(tok->eos_id(), 262u);
  EXPECT_EQ(tok->encode("hello").size(), 1u);  // 6 merges learned "hello" whole
  // A non-special added token is recognised even in plain encode (as HF does); special ones only
  // when allowed.
  write_bytes(dir.file("tokenizer.json"),
              replaced(small_tokenizer_json(), "\"added_tokens\": [",
                       "\"added_tokens\": [{\"id\": 263, \"content\": \"<|user|>\", \"special\": false}, "));
  const auto with_user = load_hf_tokenizer_json(dir.file("tokenizer.json"), "small");
  EXPECT_EQ(with_user->vocab_size(), 264u);
  const std::vector<uint32_t> ids = with_user->encode("hello<|user|>hello<|endoftext|>");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(std::vector<uint32_t>(ids.begin(), ids.begin() + 3), (std::vector<uint32_t>{259, 263, 259}));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 262u), 0);
  EXPECT_EQ(with_user->encode("hello<|user|>hello<|endoftext|>", true), (std::vector<uint32_t>{259, 263, 259, 262}));
  // tokenizer_config.json beside it may name the EOS and PAD tokens.
  write_bytes(dir.file("tokenizer_config.json"),
              R"({"eos_token": {"content": "<|endoftext|>"}, "pad_token": "<|endoftext|>"})");
  const auto with_config = load_hf_tokenizer_json(dir.file("tokenizer.json"), "small");
  EXPECT_EQ(with_config->pad_id(), std::optional<uint32_t>(262));
  write_bytes(dir.file("tokenizer_config.json"), R"({"eos_token": "</s>"})");
  const std::string message = error_of([&] { load_hf_tokenizer_json(dir.file("tokenizer.json"), "small"); });
  EXPECT_TRUE(contains(message, "</s>") && contains(message, "tokenizer_config.json")) << message;
}

TEST(TokenizerFiles, TokenizerJsonWithUnsupportedParts) {
  ScratchFolder dir;
  const std::string json = small_tokenizer_json();
  const std::string path = dir.file("tokenizer.json");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {replaced(json, "\"type\": \"BPE\"", "\"type\": \"WordPiece\""),
       {"model.type", "unsupported model type \"WordPiece\""}},
      {replaced(json, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}"),
       {"normalizer", "\"NFC\" is not supported"}},
      {replaced(json, "\"Isolated\"", "\"MergedWithPrevious\""),
       {"pre_tokenizer.pretokenizers[0]", "MergedWithPrevious"}},
      {replaced(json, "\"add_prefix_space\": false", "\"add_prefix_space\": true"), {"add_prefix_space"}},
      {replaced(json, "\"decoder\": {\"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"Metaspace\""),
       {"decoder.type", "Metaspace"}},
      {replaced(json, "\"byte_fallback\": false", "\"byte_fallback\": true"), {"model.byte_fallback"}},
      {replaced(json, "\"dropout\": null", "\"dropout\": 0.1"), {"model.dropout"}},
  };
  for (const auto& [bad, parts] : cases) {
    const std::string message = hf_error(dir, bad);
    EXPECT_TRUE(contains(message, path)) << message;
    for (const std::string& part : parts) EXPECT_TRUE(contains(message, part)) << message;
  }
}

TEST(TokenizerFiles, TokenizerJsonWithMissingOrBadMerges) {
  ScratchFolder dir;
  const std::string json = small_tokenizer_json();
  std::string message = hf_error(dir, replaced(json, "\"merges\"", "\"merges_gone\""));
  EXPECT_TRUE(contains(message, dir.file("tokenizer.json")) && contains(message, "model.merges: missing")) << message;
  message = hf_error(dir, replaced(json, "\"merges\": [\n", "\"merges\": [\n      \"Ā Ā\",\n"));
  EXPECT_TRUE(contains(message, "model.merges[0]") && contains(message, "\"ĀĀ\" is not in model.vocab")) << message;
  message = hf_error(dir, replaced(json, "\"merges\": [\n", "\"merges\": [\n      \"h e l\",\n"));
  EXPECT_TRUE(contains(message, "model.merges[0]") && contains(message, "<left> <right>")) << message;
  message = hf_error(dir, replaced(json, "\"merges\": [\n", "\"merges\": [\n      17,\n"));
  EXPECT_TRUE(contains(message, "model.merges[0]") && contains(message, "a number")) << message;
  message = hf_error(dir, replaced(json, "\"vocab\": {\n", "\"vocab\": {\n      \"日本\": 900,\n"));
  EXPECT_TRUE(contains(message, "model.vocab[\"日本\"]") && contains(message, "byte-level alphabet")) << message;
  // The array-of-pairs form of merges loads like the string form (a repeated pair keeps its first place).
  write_bytes(dir.file("tokenizer.json"), replaced(json, "\"merges\": [\n", "\"merges\": [\n      [\"e\", \"l\"],\n"));
  EXPECT_NO_THROW(load_hf_tokenizer_json(dir.file("tokenizer.json"), "small"));
}

TEST(TokenizerFiles, TokenizerJsonWithBadAddedTokens) {
  ScratchFolder dir;
  const std::string json = small_tokenizer_json();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {replaced(json, "{\"id\": 262,", "{\"id\": -1,"), "added_tokens[0].id"},
      {replaced(json, "{\"id\": 262,", "{\"id\": \"262\","), "added_tokens[0].id"},
      {replaced(json, "{\"id\": 262,", "{\"id\": 99999999999,"), "added_tokens[0].id: expected a token id"},
      {replaced(json, "\"content\": \"<|endoftext|>\"", "\"text\": \"<|endoftext|>\""),
       "added_tokens[0].content: missing"},
      {replaced(json, "\"content\": \"<|endoftext|>\"", "\"content\": 5"), "added_tokens[0].content"},
      {replaced(json, "\"lstrip\": false", "\"lstrip\": true"), "added_tokens[0].lstrip"},
      {replaced(json, "\"added_tokens\": [", "\"added_tokens\": [7, "), "added_tokens[0]"},
      {replaced(json, "{\"id\": 262,", "{\"id\": 5,"), "also added token"},
      {replaced(json, "\"added_tokens\": [", "\"added_tokens\": [{\"id\": 263, \"content\": \"<|endoftext|>\"}, "),
       "appears twice"},
  };
  for (const auto& [bad, part] : cases) {
    const std::string message = hf_error(dir, bad);
    EXPECT_TRUE(contains(message, dir.file("tokenizer.json")) && contains(message, part)) << part << ": " << message;
  }
  std::string no_eos = json;
  while (no_eos.find("<|endoftext|>") != std::string::npos) no_eos = replaced(no_eos, "<|endoftext|>", "<|end|>");
  const std::string message = hf_error(dir, no_eos);
  EXPECT_TRUE(contains(message, "no end-of-text token")) << message;
}

TEST(TokenizerFiles, TokenizerJsonTruncatedOrMissing) {
  ScratchFolder dir;
  const std::string json = small_tokenizer_json();
  std::string message = hf_error(dir, json.substr(0, json.size() / 2));
  EXPECT_TRUE(contains(message, dir.file("tokenizer.json")) && contains(message, "invalid JSON")) << message;
  message = hf_error(dir, "[]");
  EXPECT_TRUE(contains(message, "expected an object")) << message;
  message = error_of([&] { make_tokenizer(dir.file("absent.json")); });
  EXPECT_TRUE(contains(message, dir.file("absent.json"))) << message;
}
