// `fathom generate --prompts FILE` (train/generate/prompt_lines.h): one prompt per line, a final newline
// and CRLF endings read as expected, and an empty file, a blank line or a line without tokens is an
// error naming the file and the line.
#include <gtest/gtest.h>

#include "data/tokenizer.h"
#include "tests/support/test_support.h"
#include "train/generate/prompt_lines.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

std::vector<std::string> texts(const std::vector<PromptLine>& lines) {
  std::vector<std::string> out;
  for (const PromptLine& line : lines) out.push_back(line.text);
  return out;
}

}  // namespace

TEST(PromptLines, OnePromptPerLine) {
  EXPECT_EQ(texts(split_prompt_lines("a\nbc d\n", "f")), (std::vector<std::string>{"a", "bc d"}));
  EXPECT_EQ(texts(split_prompt_lines("a\r\nb", "f")), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(texts(split_prompt_lines(" ", "f")), (std::vector<std::string>{" "}));  // a space is a prompt
  const std::vector<PromptLine> lines = split_prompt_lines("x\ny\nz\n", "f");
  EXPECT_EQ(lines[2].line, 3);
}

TEST(PromptLines, EmptyFilesBlankLinesAndTokenlessLinesAreErrorsNamingTheLine) {
  expect_error([] { split_prompt_lines("", "p.txt"); }, {"--prompts p.txt holds no prompts"});
  expect_error([] { split_prompt_lines("a\n\nb\n", "p.txt"); }, {"--prompts p.txt: line 2 is empty"});
  expect_error([] { split_prompt_lines("\n", "p.txt"); }, {"line 1 is empty"});
  expect_error([] { split_prompt_lines("a\nb\n\n", "p.txt"); }, {"line 3 is empty"});
  expect_error([] { split_prompt_lines("a\n\r\n", "p.txt"); }, {"line 2 is empty"});
  expect_error([] { read_prompt_lines("/no/such/prompts.txt"); }, {"/no/such/prompts.txt"});
  const auto tokenizer = make_tokenizer("bytes");
  EXPECT_EQ(encode_prompt_lines(split_prompt_lines("AB\nC", "f"), *tokenizer, "f"),
            (std::vector<std::vector<uint32_t>>{{65, 66}, {67}}));
  // A tokenizer that gives a line no tokens (here: every "~").
  struct Tildes final : Tokenizer {
    std::string decode(std::span<const uint32_t>) const override { return ""; }
    uint32_t vocab_size() const override { return 256; }
    uint32_t eos_id() const override { return 255; }
    std::string name() const override { return "tildes"; }
    const std::vector<AddedToken>& added_tokens() const override { return none; }
    void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const override {
      for (char c : text)
        if (c != '~') out.push_back(uint32_t(static_cast<unsigned char>(c)));
    }
    std::vector<AddedToken> none;
  };
  expect_error([] { encode_prompt_lines(split_prompt_lines("a\n~~\n", "p.txt"), Tildes(), "p.txt"); },
               {"--prompts p.txt: line 2 encodes to no tokens"});
}
