// Byte-level BPE: pre-tokenize with a regex, byte-pair encode each piece, plus added tokens
// ("<|endoftext|>", ...) with fixed ids. Built by the file loaders in data/bpe_files.h.
#pragma once
#include <unordered_map>

#include "data/bpe_model.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"

namespace fathom {

class BpeTokenizer final : public Tokenizer {
 public:
  // The added tokens' ids must be unassigned in the model and their texts unique. eos_text (and
  // pad_text, if given) must be added tokens. vocab_size 0 means one past the largest id; a
  // larger one leaves the ids in between unassigned. Violations are errors naming `source`.
  BpeTokenizer(std::string name, BpeModel model, Pretokenizer pretokenizer, std::vector<AddedToken> added,
               const std::string& eos_text, const std::optional<std::string>& pad_text, uint32_t vocab_size,
               const std::string& source);

  std::string decode(std::span<const uint32_t> ids) const override;
  uint32_t vocab_size() const override { return vocab_size_; }
  uint32_t eos_id() const override { return eos_id_; }
  std::optional<uint32_t> pad_id() const override { return pad_id_; }
  std::string name() const override { return name_; }
  const std::vector<AddedToken>& added_tokens() const override { return added_; }

  const BpeModel& model() const { return model_; }
  const Pretokenizer& pretokenizer() const { return pretokenizer_; }

 protected:
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const override;

 private:
  std::string name_;
  BpeModel model_;
  Pretokenizer pretokenizer_;
  std::vector<AddedToken> added_;
  std::unordered_map<uint32_t, size_t> added_by_id_;
  uint32_t vocab_size_ = 0;
  uint32_t eos_id_ = 0;
  std::optional<uint32_t> pad_id_;
};

}  // namespace fathom
