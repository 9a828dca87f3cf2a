// The interface every tokenizer implements (bytes; byte-level BPE from tiktoken rank files, GPT-2's
// encoder.json + vocab.bpe or HF tokenizer.json), so text reading, data prep and generation never
// depend on a concrete one.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

// The end-of-text token of GPT-2, cl100k_base, dolma2 and the tokenizers fathom trains.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// A token with fixed text outside the BPE merges: "<|endoftext|>", "<|pad|>", ...
struct AddedToken {
  std::string text;
  uint32_t id = 0;
  // Special tokens are recognised in text only when encode() is asked to (allow_special). A
  // non-special added token (HF tokenizer.json's "special": false) is always recognised, as HF does.
  bool special = true;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text to ids. By default the text of special tokens such as "<|endoftext|>" is plain text
  // (documents are separated by appending eos_id() explicitly); allow_special turns each
  // occurrence into its id instead.
  std::vector<uint32_t> encode(std::string_view text, bool allow_special = false) const;
  // Ids to text; an id >= vocab_size(), or one that names no token, is an error naming its
  // position and value. Special tokens decode to their text.
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  // One past the largest id (ids below it may still be unassigned, as in cl100k_base).
  virtual uint32_t vocab_size() const = 0;
  virtual uint32_t eos_id() const = 0;
  virtual std::optional<uint32_t> pad_id() const { return std::nullopt; }
  virtual std::string name() const = 0;
  virtual const std::vector<AddedToken>& added_tokens() const = 0;
  // The id of an added token's text ("<|endoftext|>"), or nullopt.
  std::optional<uint32_t> token_to_id(std::string_view added_token_text) const;

 protected:
  // Appends the ids of text that holds no added-token text to recognise.
  virtual void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const = 0;
};

// Names make_tokenizer accepts besides paths.
std::vector<std::string> known_tokenizers();
// Builds a tokenizer by name or path:
//   "bytes"   byte-level ids 0-255, EOS 256
//   "cl100k"  OpenAI's cl100k_base (EOS "<|endoftext|>" 100257; vocab 100277)
//   "dolma2"  OLMo2's tokenizer: cl100k_base ranks, EOS 100257, PAD "<|pad|>" 100277, vocab 100278
//   "gpt2"    GPT-2 (EOS 50256, vocab 50257)
//   a path    a tiktoken rank file, a folder with encoder.json + vocab.bpe, or a HF tokenizer.json
// The named BPE files are read from $FATHOM_TOKENIZERS when set, else from the source tree's
// data/tokenizers. Anything else is an error listing the known names.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace fathom
