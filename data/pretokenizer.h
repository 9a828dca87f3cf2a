// Splits text into the pieces BPE encodes separately (words with their leading space, number
// groups, punctuation runs, whitespace), by a regex with Unicode classes and lookahead: PCRE2,
// JIT-compiled where the platform supports it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

// GPT-2's pattern (also HF's ByteLevel pre-tokenizer with use_regex).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// cl100k_base's pattern (OLMo2's dolma2 uses it too).
inline constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class Pretokenizer {
 public:
  // A pattern that does not compile is an error naming `source` and the offset.
  Pretokenizer(std::string pattern, const std::string& source);
  ~Pretokenizer();
  Pretokenizer(Pretokenizer&& other) noexcept;
  Pretokenizer& operator=(Pretokenizer&& other) noexcept;
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Appends text's pieces to `pieces`: the regex matches, and the text between them (only bytes
  // the pattern cannot match, such as invalid UTF-8) as pieces of their own, so the pieces always
  // concatenate back to the text and no byte is dropped.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8, kept out of the header
};

}  // namespace fathom
