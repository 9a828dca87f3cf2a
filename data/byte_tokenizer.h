// Byte-level tokenizer: every byte is its own id (0..255) and 256 is <|endoftext|>. Needs no vocab
// file, round-trips any byte string (valid UTF-8 or not), so it drives tests and tiny experiments.
#pragma once
#include "data/tokenizer.h"

namespace fathom {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kEos = 256;
  static constexpr uint32_t kVocabSize = 257;
  static constexpr std::string_view kEosText = kEndOfText;

  // EOS decodes to "<|endoftext|>".
  std::string decode(std::span<const uint32_t> ids) const override;
  uint32_t vocab_size() const override { return kVocabSize; }
  uint32_t eos_id() const override { return kEos; }
  std::string name() const override { return "bytes"; }
  const std::vector<AddedToken>& added_tokens() const override;

 protected:
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const override;
};

}  // namespace fathom
