// `fathom generate --prompts FILE`: a file of prompts, one per line, decoded together as one batch
// (train/generate/generator.h: generate_batch). A line ends at "\n" (a "\r" before it is dropped, so
// CRLF files read the same), and a final "\n" ends the last line rather than starting an empty one. A
// prompt cannot hold a newline: --prompt-file reads one multi-line prompt. An empty line is an error,
// not skipped: prompts are named by their line, and a blank one is most likely a slip.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace fathom {

struct PromptLine {
  int64_t line = 0;  // 1-based
  std::string text;
};

// The lines of `text`, read from `path` (named in the errors): an error when it holds no lines or a line
// is empty, naming the line.
std::vector<PromptLine> split_prompt_lines(const std::string& text, const std::string& path);
// split_prompt_lines of the file's contents.
std::vector<PromptLine> read_prompt_lines(const std::string& path);
// Each line's ids: an error naming the line when one encodes to no tokens.
std::vector<std::vector<uint32_t>> encode_prompt_lines(const std::vector<PromptLine>& lines, const Tokenizer& tokenizer,
                                                       const std::string& path);

}  // namespace fathom
