// Trains a byte-level BPE tokenizer on text (GPT-2 regex pre-tokenization, merges by pair
// frequency) and writes it as a Hugging Face tokenizer.json, which make_tokenizer(path) and HF
// `tokenizers` both load.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fathom {

struct TrainedBpe {
  struct Merge {
    uint32_t left, right, merged;
  };
  // Token bytes by id: the 256 single bytes (in GPT-2's byte-level order), then the merged tokens.
  std::vector<std::string> tokens;
  // In the order learned, which is the order they apply. Two merges may make the same token (a+bc
  // and ab+c): the second reuses the first one's id, so there can be more merges than new tokens.
  std::vector<Merge> merges;
};

// Learns merges from pieces and their counts until there are `tokens` tokens (256 bytes
// included). Each step merges the most frequent adjacent pair (ties: the smaller left id, then
// the smaller right id), updating only the counts of the pieces that hold it. Stops early when no
// pair is left. Deterministic: the result depends only on the counts, not on the map's order.
TrainedBpe train_bpe(const std::unordered_map<std::string, uint64_t>& piece_counts, size_t tokens);

// The tokenizer.json text: ByteLevel BPE with the given pre-tokenizer regex, the trained tokens,
// and `eos_text` as a special added token with the id after the last token.
std::string trained_bpe_json(const TrainedBpe& bpe, std::string_view pattern, std::string_view eos_text);

struct BpeTrainingReport {
  size_t bytes = 0;   // text read
  size_t pieces = 0;  // pre-tokenized pieces
  size_t unique_pieces = 0;
  size_t merges = 0;        // merges learned
  uint32_t vocab_size = 0;  // tokens + EOS: the asked size unless the text ran out of pairs
};

// Reads the text files, pre-tokenizes them with GPT-2's regex, learns vocab_size - 257 tokens
// (vocab_size counts the 256 bytes and "<|endoftext|>") and writes the tokenizer.json atomically
// to `out`. Missing or unreadable files, a vocab_size below 257 and text that is all blank are
// errors.
BpeTrainingReport train_bpe_tokenizer(const std::vector<std::string>& files, uint32_t vocab_size,
                                      const std::filesystem::path& out);

}  // namespace fathom
