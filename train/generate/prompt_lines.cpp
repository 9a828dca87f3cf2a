#include "train/generate/prompt_lines.h"

#include "core/error.h"
#include "core/file_io.h"

namespace fathom {

std::vector<PromptLine> split_prompt_lines(const std::string& text, const std::string& path) {
  std::vector<PromptLine> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const int64_t number = int64_t(lines.size()) + 1;
    FATHOM_CHECK(!line.empty(), "--prompts ", path, ": line ", number,
                 " is empty; each line is one prompt (remove the blank line)");
    lines.push_back({number, std::move(line)});
    begin = end + 1;
  }
  FATHOM_CHECK(!lines.empty(), "--prompts ", path, " holds no prompts (one prompt per line)");
  return lines;
}

std::vector<PromptLine> read_prompt_lines(const std::string& path) { return split_prompt_lines(read_file(path), path); }

std::vector<std::vector<uint32_t>> encode_prompt_lines(const std::vector<PromptLine>& lines, const Tokenizer& tokenizer,
                                                       const std::string& path) {
  std::vector<std::vector<uint32_t>> prompts;
  for (const PromptLine& line : lines) {
    prompts.push_back(tokenizer.encode(line.text));
    FATHOM_CHECK(!prompts.back().empty(), "--prompts ", path, ": line ", line.line, " encodes to no tokens");
  }
  return prompts;
}

}  // namespace fathom
