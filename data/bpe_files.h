// Loaders for the three file formats byte-level BPE tokenizers ship in. Every problem with a file
// is a fathom::Error naming the file (and the line, key or entry) and what is wrong.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"

namespace fathom {

// The largest token id a file may give: far above any real vocabulary (they are dense, up to ~1M
// ids), low enough that a corrupt id cannot make the id tables exhaust memory.
inline constexpr int64_t kMaxTokenId = (int64_t(1) << 24) - 1;

// What a tiktoken rank file does not say itself: the regex and the special tokens.
struct TiktokenSpec {
  std::string name;
  std::string pattern;
  std::vector<AddedToken> added;  // empty: eos_text alone, at the id after the last rank (GPT-2 style)
  std::string eos_text;
  std::optional<std::string> pad_text;
  uint32_t vocab_size = 0;  // 0: one past the largest id
};

// A tiktoken rank file: one "<base64 token bytes> <rank>" line per token, ranks 0, 1, 2, ...
// (blank lines are skipped). Pairs merge by tiktoken's rule (data/bpe_model.h).
std::unique_ptr<BpeTokenizer> load_tiktoken(const std::filesystem::path& rank_file, const TiktokenSpec& spec);

// GPT-2's encoder.json (byte-level token text -> id) and vocab.bpe (merges in priority order,
// "#version" header optional) in one folder; "<|endoftext|>" is the special EOS token.
std::unique_ptr<BpeTokenizer> load_gpt2_folder(const std::filesystem::path& folder, const std::string& name);

// A Hugging Face tokenizer.json with a BPE model, byte-level merges, no normalizer, a ByteLevel
// pre-tokenizer (alone, or after one regex Split) and a ByteLevel decoder. Added tokens keep their
// ids. EOS is tokenizer_config.json's eos_token when that file sits beside it, else
// "<|endoftext|>"; PAD likewise pad_token, else "<|pad|>" when present.
std::unique_ptr<BpeTokenizer> load_hf_tokenizer_json(const std::filesystem::path& file, const std::string& name);

}  // namespace fathom
